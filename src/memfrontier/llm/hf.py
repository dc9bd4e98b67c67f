"""A :class:`~memfrontier.llm.base.ChatClient` over a local Hugging Face causal LM (transformers),
and the one loading path that the LoRA trainers (:mod:`memfrontier.train.lora_sft`,
:mod:`memfrontier.train.grpo`) share with it.

What it serves:

* the packaged Gemma 3 270M GGUF (``model=None``), de-quantized by transformers to a dense fp32
  model (268M parameters) -- the *same* weights the llama.cpp backend
  (:mod:`memfrontier.llm.embedded`) runs. Loading takes tens of seconds on two CPU cores, most of
  it parsing the GGUF header (its 262k-token vocabulary), which transformers does once each for
  the tokenizer, the config and the weights; here the three share one parse (about 1.5x faster,
  ``benchmarks/bench_hf_load.py``);
* a saved checkpoint directory, e.g. LoRA-A merged into the base (``base_A``, MemoryCPT Sec. 3.4);
* either of them with a PEFT adapter on top (``adapter=``, e.g. LoRA-B, MemoryCPT Eq. 12).

Prompts are rendered with :func:`memfrontier.llm.prompt_format.render_prompt` (no chat template) and
tokenized with the tokenizer's BOS, exactly as the trainers tokenize their prompts, so a model is
served with the context it was trained on.

Models are loaded lazily and cached once per process and (source, device[, adapter]); a model is
not thread-safe, so each cached model has a lock and decoding runs in :func:`asyncio.to_thread`.
Trainers get private deep copies (:func:`load_causal_lm` ``copy=True``) because PEFT and merging
change a model in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy as _copy
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.extras import require_extra
from ..core.ledger import current_ledger
from .base import Completion, LLMError, Message
from .local_models import MODEL_ID, default_model_path
from .prompt_format import render_prompt

__all__ = ["HFLLM", "default_model_id", "load_causal_lm", "load_tokenizer"]

#: Output tokens reserved below the context size when a huge ``max_tokens`` would leave no room
#: for the prompt (as in the embedded backend).
_MIN_PROMPT_TOKENS = 64

#: Directory names that say nothing about the model; the model id then also names their parent.
_GENERIC_DIR_NAMES = frozenset({"adapter", "merged", "model", "final"})


@dataclass
class _Loaded:
    model: Any
    tokenizer: Any
    lock: threading.Lock


_LOAD_LOCK = threading.RLock()
_TOKENIZERS: dict[str, Any] = {}
_MODELS: dict[tuple[str, str, str | None], _Loaded] = {}


def _source(model: str | os.PathLike | None) -> tuple[str, str | None]:
    """``(directory or hub id, gguf file name or None)`` for a model argument: None -> the packaged
    GGUF; a ``.gguf`` file -> its folder and name; anything else is passed to ``from_pretrained``."""
    path = default_model_path() if model is None else os.path.expanduser(os.fspath(model))
    if path.endswith(".gguf"):
        if not os.path.isfile(path):
            raise LLMError(f"no GGUF file at {path}")
        folder, name = os.path.split(os.path.abspath(path))
        return folder, name
    if os.path.isdir(path):
        return os.path.abspath(path), None
    if os.path.exists(path) or path.startswith((".", "/")):
        raise LLMError(f"{path} is not a model directory or a .gguf file")
    return path, None  # a hub id: resolved from the local HF cache (HF_HUB_OFFLINE) or the hub


def _key(model: str | os.PathLike | None) -> str:
    folder, gguf = _source(model)
    return os.path.join(folder, gguf) if gguf else folder


def load_tokenizer(model: str | os.PathLike | None = None):
    """The process-wide tokenizer of ``model`` (see :func:`load_causal_lm` for the argument).
    Loading the packaged GGUF's tokenizer takes about 15 s (vocabulary conversion). Raises
    :class:`LLMError` when it cannot be loaded."""
    key = _key(model)
    with _LOAD_LOCK:
        tok = _TOKENIZERS.get(key)
        if tok is not None:
            return tok
        from transformers import AutoTokenizer

        folder, gguf = _source(model)
        try:
            tok = AutoTokenizer.from_pretrained(folder, **({"gguf_file": gguf} if gguf else {}))
        except (OSError, ValueError, KeyError) as e:
            raise LLMError(f"could not load the tokenizer of {key}: {e}") from e
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        _TOKENIZERS[key] = tok
        return tok


@contextlib.contextmanager
def _gguf_parsed_once():
    """Within the block ``gguf.GGUFReader(path)`` gives one reader per file.

    transformers parses a GGUF file's header once for the tokenizer, once for the config and once
    for the weights (``load_gguf_checkpoint``), and one parse of the packaged Gemma's metadata (its
    262,144-token vocabulary, read element by element) takes ~15 s on two CPU cores -- two thirds
    of the load. A reader is a read-only memory map that transformers only reads; it imports the
    class when it loads, so it gets the wrapper (with another import style it gets the class: the
    load is then as before, only slower). Callers hold ``_LOAD_LOCK``."""
    try:
        import gguf
    except ImportError:  # not a GGUF load path then
        yield
        return
    original = gguf.GGUFReader
    readers: dict[tuple[str, str], Any] = {}

    def reader(path, mode="r"):
        key = (os.path.abspath(os.fspath(path)), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def _load_entry(model: str | os.PathLike | None, device: str) -> _Loaded:
    key = (_key(model), str(device), None)
    with _LOAD_LOCK:
        hit = _MODELS.get(key)
        if hit is not None:
            return hit
        from transformers import AutoModelForCausalLM

        folder, gguf = _source(model)
        kwargs: dict[str, Any] = {}
        if gguf:
            require_extra("train", "gguf", feature="the 'hf' model backend on a GGUF file")
            from transformers import GgufConfig

            # dequantize=True: a plain dense fp32 model (trainable, serialisable), never GGUF blocks
            kwargs = {"gguf_file": gguf, "quantization_config": GgufConfig(gguf_file=gguf, dequantize=True)}
        with _gguf_parsed_once() if gguf else contextlib.nullcontext():
            tok = load_tokenizer(model)
            try:
                lm = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
                lm.to(device)
            except (OSError, ValueError, KeyError, RuntimeError) as e:
                raise LLMError(f"could not load the model {key[0]}: {e}") from e
        lm.eval()
        hit = _Loaded(lm, tok, threading.Lock())
        _MODELS[key] = hit
        return hit


def _load_adapter_entry(model: str | os.PathLike | None, adapter: str | os.PathLike, device: str) -> _Loaded:
    """``model`` with the PEFT adapter merged into a private copy (inference as fast as the base)."""
    adapter = os.path.abspath(os.fspath(adapter))
    key = (_key(model), str(device), adapter)
    with _LOAD_LOCK:
        hit = _MODELS.get(key)
        if hit is not None:
            return hit
        if not os.path.isfile(os.path.join(adapter, "adapter_config.json")):
            raise LLMError(f"{adapter} is not a PEFT adapter directory (no adapter_config.json)")
        base, tok = load_causal_lm(model, device=device, copy=True)
        require_extra("train", "peft", feature="a PEFT adapter")
        from peft import PeftModel

        try:
            lm = PeftModel.from_pretrained(base, adapter).merge_and_unload()
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            raise LLMError(f"could not apply the adapter {adapter} to {key[0]}: {e}") from e
        lm.eval()
        hit = _Loaded(lm, tok, threading.Lock())
        _MODELS[key] = hit
        return hit


def load_causal_lm(model: str | os.PathLike | None = None, *, device: str = "cpu", copy: bool = False):
    """``(model, tokenizer)`` for a local causal LM, loaded once per process and (source, device).

    ``model``: None = the packaged Gemma 3 270M GGUF (de-quantized to dense fp32, tens of seconds
    on two cores); a path to a ``.gguf`` file; a checkpoint directory (``save_pretrained`` output, e.g. a
    merged LoRA-A model); or a hub id already in the local HF cache. ``copy=True`` returns private
    deep copies (model in train mode) that a trainer may wrap with PEFT or merge in place; the
    default returns the shared instances (eval mode), which callers must not modify.

    The tokenizer adds BOS; its pad token is set (EOS when the checkpoint has none).
    Raises :class:`LLMError` when the files cannot be found or loaded.
    """
    hit = _load_entry(model, device)
    if not copy:
        return hit.model, hit.tokenizer
    with hit.lock:  # not while a decode runs on the shared instance
        lm = _copy.deepcopy(hit.model)
        tok = _copy.deepcopy(hit.tokenizer)
    lm.train()
    return lm, tok


def _display_name(path: str | os.PathLike) -> str:
    p = Path(os.fspath(path))
    if p.suffix == ".gguf":
        return p.stem
    p = p.resolve() if p.exists() else p
    if p.name in _GENERIC_DIR_NAMES and p.parent.name:
        return f"{p.parent.name}/{p.name}"
    return p.name or str(p)


def default_model_id(model: str | os.PathLike | None = None, adapter: str | os.PathLike | None = None) -> str:
    """The ledger id of ``model`` (+ ``adapter``): ``"gemma-3-270m-q4_k_m"`` for the packaged base
    (priced by the price book), else the directory (or file stem) name, with ``"+" + adapter
    name`` appended when an adapter is applied. A generic directory name (``adapter``, ``merged``)
    is prefixed with its parent's: ``runs/qad1/merged`` -> ``"qad1/merged"``."""
    base = MODEL_ID if model is None else _display_name(model)
    return base if adapter is None else f"{base}+{_display_name(adapter)}"


class _FirstLineStop:
    """A transformers stopping criterion: stop once the generated text holds a non-empty line
    followed by a newline (``single_line``). Batch size 1."""

    def __init__(self, tokenizer, prompt_len: int):
        self.tokenizer = tokenizer
        self.prompt_len = prompt_len

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        text = self.tokenizer.decode(input_ids[0, self.prompt_len :], skip_special_tokens=True)
        done = "\n" in text.lstrip()
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


def _cut_at_stop(text: str, stop: list[str] | None) -> tuple[str, bool]:
    """``text`` up to the earliest stop string (excluded), and whether one occurred."""
    cut = min((i for i in (text.find(s) for s in (stop or []) if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


class HFLLM:
    """A local Hugging Face causal LM as a :class:`~memfrontier.llm.base.ChatClient`.

    Args:
        model: None = the packaged Gemma 3 270M GGUF through transformers; a checkpoint directory
            (e.g. ``out_dir/"merged"`` of :func:`memfrontier.train.lora_sft.train_lora_sft`); a
            ``.gguf`` file; or a hub id already in the local cache.
        adapter: a PEFT adapter directory applied on top (merged into a private copy at load time),
            e.g. ``out_dir/"adapter"`` of :func:`memfrontier.train.grpo.train_grpo` (LoRA-B).
        model_id: the ledger / price-book id; default :func:`default_model_id` (``model``, ``adapter``).
        context_tokens: prompt plus output tokens per call (default 8192).
        device: torch device ("cpu", "cuda", "cuda:1").
        seed: when set, sampling (``temperature > 0``) is seeded per call (reproducible draws).

    ``complete`` renders ``messages`` with :func:`~memfrontier.llm.prompt_format.render_prompt`,
    tokenizes with BOS and generates up to ``max_tokens`` tokens: greedy when ``temperature <= 0``,
    else plain sampling at that temperature (no top-k / top-p: the distribution GRPO trains, see
    :mod:`memfrontier.train.grpo`). No repetition penalty. ``stop`` strings end generation and
    are cut from ``text``; ``single_line`` returns the first non-empty line. ``json_schema`` is
    NOT enforced (transformers has no grammar here): callers parse defensively
    (:func:`memfrontier.llm.parsing.parse_json`). Special tokens are removed from ``text``.

    Usage: ``input_tokens`` = prompt tokens fed (BOS included, after truncation),
    ``output_tokens`` = tokens generated (a final EOS not counted, as llama.cpp counts).
    When prompt + ``max_tokens`` exceed ``context_tokens`` the prompt is cut from the left (BOS
    and the end kept) and ``truncated_prompt`` is counted on the current ledger. Raises
    :class:`LLMError` when the model cannot be loaded or generation fails.
    """

    def __init__(
        self,
        model: str | os.PathLike | None = None,
        *,
        adapter: str | os.PathLike | None = None,
        model_id: str | None = None,
        context_tokens: int = 8192,
        device: str = "cpu",
        seed: int | None = None,
    ):
        if int(context_tokens) <= _MIN_PROMPT_TOKENS:
            raise ValueError(f"context_tokens must exceed {_MIN_PROMPT_TOKENS}, got {context_tokens}")
        self.model = None if model is None else os.fspath(model)
        self.adapter = None if adapter is None else os.fspath(adapter)
        self.model_id = model_id or default_model_id(self.model, self.adapter)
        self._context_tokens = int(context_tokens)
        self.device = str(device)
        self.seed = seed

    # --- model ------------------------------------------------------------------------------
    def _entry(self) -> _Loaded:
        if self.adapter is not None:
            return _load_adapter_entry(self.model, self.adapter, self.device)
        return _load_entry(self.model, self.device)

    # --- protocol --------------------------------------------------------------------------
    @property
    def context_tokens(self) -> int:
        """Prompt plus output tokens per call."""
        return self._context_tokens

    def count_tokens(self, text: str) -> int:
        """Exact token count of ``text`` (no BOS). Loads only the tokenizer if needed."""
        if not text:
            return 0
        return len(load_tokenizer(self.model)(text, add_special_tokens=False)["input_ids"])

    async def complete(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        json_schema: dict | None = None,
        stop: list[str] | None = None,
        single_line: bool = False,
    ) -> Completion:
        """Generate after :func:`render_prompt` ``(messages)``; see the class docstring.
        ``json_schema`` is accepted for the protocol and ignored (not enforced)."""
        if json_schema is not None and single_line:
            raise ValueError("json_schema and single_line are exclusive")
        prompt = render_prompt(messages)
        ledger = current_ledger()  # read here: contextvars do not follow into the worker thread
        return await asyncio.to_thread(self._complete_sync, prompt, max_tokens, temperature, stop, single_line, ledger)

    # --- implementation --------------------------------------------------------------------
    @contextlib.contextmanager
    def _rng(self, greedy: bool, device):
        """Seed sampling with ``self.seed`` without disturbing the global RNG; a no-op otherwise."""
        if greedy or self.seed is None:
            yield
            return
        import torch

        with torch.random.fork_rng(devices=[] if device.type == "cpu" else None):
            torch.manual_seed(int(self.seed))
            yield

    def _complete_sync(self, prompt, max_tokens, temperature, stop, single_line, ledger) -> Completion:
        import torch

        hit = self._entry()
        lm, tok = hit.model, hit.tokenizer
        max_tokens = max(1, min(int(max_tokens), self._context_tokens - _MIN_PROMPT_TOKENS))
        ids = list(tok(prompt)["input_ids"])
        budget = self._context_tokens - max_tokens
        if len(ids) > budget:
            if tok.bos_token_id is not None and ids and ids[0] == tok.bos_token_id:
                ids = [ids[0]] + ids[len(ids) - (budget - 1) :]
            else:
                ids = ids[len(ids) - budget :]
            if ledger is not None:
                ledger.count("truncated_prompt")
        input_ids = torch.tensor([ids], device=lm.device)
        greedy = temperature is None or temperature <= 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "do_sample": not greedy,
            "pad_token_id": tok.pad_token_id,
            "attention_mask": torch.ones_like(input_ids),
        }
        if not greedy:
            kwargs.update(temperature=float(temperature), top_k=0, top_p=1.0)
        if stop:
            kwargs.update(stop_strings=[s for s in stop if s], tokenizer=tok)
        if single_line:
            from transformers import StoppingCriteriaList

            kwargs["stopping_criteria"] = StoppingCriteriaList([_FirstLineStop(tok, len(ids))])
        with hit.lock:
            try:
                with torch.inference_mode(), self._rng(greedy, lm.device):
                    out = lm.generate(input_ids, **kwargs)
            except (RuntimeError, ValueError) as e:
                raise LLMError(f"{self.model_id}: generation failed: {e}") from e
        new = out[0, len(ids) :].tolist()
        eos_ids = _eos_ids(lm, tok)
        ended_eos = bool(new) and new[-1] in eos_ids
        if ended_eos:
            new = new[:-1]
        while new and new[-1] == tok.pad_token_id and tok.pad_token_id not in eos_ids:
            new.pop()
        text = tok.decode(new, skip_special_tokens=True)
        text, stopped = _cut_at_stop(text, stop)
        if single_line:
            stopped = stopped or "\n" in text.lstrip()
            text = _first_line(text)
        finish = "stop" if (ended_eos or stopped or len(new) < max_tokens) else "length"
        return Completion(
            text=text,
            model_id=self.model_id,
            input_tokens=len(ids),
            output_tokens=len(new),
            finish_reason=finish,
        )


def _eos_ids(lm, tok) -> set[int]:
    """Token ids that end generation: the tokenizer's EOS and the generation config's."""
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    gen = getattr(lm, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif eos:
        ids.update(int(e) for e in eos)
    return ids
