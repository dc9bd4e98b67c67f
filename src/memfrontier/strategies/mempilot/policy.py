"""The MemPilot policy in transformers (+ PEFT): schema-guided decoding that records what it sampled.

:class:`HFPolicy` is a :class:`~memfrontier.llm.base.ChatClient` over a causal LM loaded through
:func:`memfrontier.llm.hf.load_causal_lm` (the packaged Gemma 3 270M, optionally with a LoRA
adapter). Unlike :class:`~memfrontier.llm.hf.HFLLM` it *enforces* ``json_schema``: a base 270M
model sampled freely at temperature 1 almost never writes a valid tool call, so every GRPO group
would be all format-invalid (reward -1, zero advantage). Decoding walks the schema (the subset
:func:`memfrontier.strategies.mempilot.protocol.decision_schema` uses: ``anyOf``, objects with all
properties in order, arrays with min/maxItems, ``const``, ``enum``, ``boolean`` and one-line
strings without ``< > " \\``) and, at each token, masks the logits to the tokens the schema allows
— the token-level equivalent of llama.cpp's grammar sampling:

* fixed text (braces, keys, constants) is *forced*: appended without sampling;
* choices (anyOf branch, enum value, boolean, another array item or not) are sampled token by
  token from a trie of the options' tokenizations;
* string contents are sampled from the "safe" tokens plus the closing quote.

Once ``max_tokens`` are spent the walker stops sampling and only closes the value (strings end,
choices take their first option, arrays close), so the output is always complete JSON.

Every generation is logged as a :class:`Generation` (prompt ids, completion ids, and which
completion tokens were *sampled* — forced tokens carry no decision and are left out of the policy
gradient), which is what :mod:`memfrontier.train.mempilot_trainer` trains on. Log-probabilities
are recomputed by the trainer (unconstrained log-softmax of the model at temperature 1), as
trainers do for grammar-constrained rollouts.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from dataclasses import dataclass, field

from ...core.extras import require_extra
from ...core.ledger import current_ledger
from ...llm.base import Completion, LLMError, Message
from ...llm.local_models import MODEL_ID
from ...llm.prompt_format import render_prompt

_FORBIDDEN = set('<>"\\\n\r\t')
_MIN_PROMPT_TOKENS = 64


@dataclass
class Generation:
    """One policy call: ``prompt_ids`` (BOS included) and ``completion_ids``; ``sampled[k]`` is True
    when completion token k was drawn from the model (False: forced by the schema)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    sampled: list[bool] = field(default_factory=list)


class SchemaError(ValueError):
    """The JSON schema uses a construct the guided decoder does not support."""


class _Decoder:
    """Incremental decoding with a KV cache; each step may restrict the next token to a set."""

    def __init__(self, policy: "HFPolicy", prompt_ids: list[int], temperature: float, max_tokens: int):
        import torch

        self.p = policy
        self.torch = torch
        self.temperature = float(temperature)
        self.max_tokens = int(max_tokens)
        self.out: list[int] = []
        self.sampled: list[bool] = []
        self.cache = None
        self._logits = self._forward(prompt_ids)

    def _forward(self, ids: list[int]):
        torch = self.torch
        with torch.inference_mode():
            res = self.p.model(
                input_ids=torch.tensor([ids], device=self.p.model.device),
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1,
            )
        self.cache = res.cache
        return res.logits[0, -1].float()

    @property
    def full(self) -> bool:
        """The token budget is spent: from here on the walker only closes the JSON (forced text)."""
        return len(self.out) >= self.max_tokens

    def push(self, ids: list[int], sampled: bool) -> None:
        if not ids:
            return
        self.out.extend(ids)
        self.sampled.extend([sampled] * len(ids))
        self._logits = self._forward(ids)

    def draw(self, allowed: list[int] | None) -> int:
        """Sample (or argmax at temperature 0) the next token among ``allowed`` (None: any)."""
        torch = self.torch
        logits = self._logits
        if allowed is not None:
            idx = torch.tensor(allowed, device=logits.device)
            sub = logits[idx]
        else:
            sub = logits
        if self.temperature <= 0:
            k = int(torch.argmax(sub))
        else:
            probs = torch.softmax(sub / self.temperature, dim=-1)
            k = int(torch.multinomial(probs, 1, generator=self.p.generator))
        return allowed[k] if allowed is not None else k


class _SchemaWalker:
    """Writes one JSON value for a schema through a :class:`_Decoder` (see the module docstring)."""

    def __init__(self, policy: "HFPolicy", dec: _Decoder):
        self.p = policy
        self.dec = dec
        self.pending = ""  # text already emitted by a branch choice, consumed by the next forced pieces

    # -- primitives --------------------------------------------------------------------------
    def force(self, text: str) -> None:
        if self.pending:
            n = min(len(self.pending), len(text))
            if self.pending[:n] != text[:n]:
                raise SchemaError(f"internal: forced {text!r} does not match emitted {self.pending!r}")
            self.pending, text = self.pending[n:], text[n:]
        if text:
            self.dec.push(self.p.encode(text), sampled=False)

    def choose(self, options: list[str]) -> int:
        """Sample one of ``options`` (distinct texts) token by token; returns its index. The chosen text is emitted."""
        if len(options) == 1 or self.dec.full:  # out of budget: the first option, forced
            self.force(options[0])
            return 0
        if self.pending:
            raise SchemaError("internal: a choice cannot follow a pending branch prefix")
        toks = [self.p.encode(o) for o in options]
        alive = list(range(len(options)))
        pos = 0
        while True:
            done = [i for i in alive if len(toks[i]) == pos]
            if done:  # an option ended (options are distinct texts; a shorter one wins at its end)
                return done[0]
            nxt = sorted({toks[i][pos] for i in alive})
            if len(nxt) == 1:
                tok, sampled = nxt[0], False
            else:
                tok, sampled = self.dec.draw(nxt), True
            self.dec.push([tok], sampled=sampled)
            alive = [i for i in alive if toks[i][pos] == tok]
            pos += 1

    # -- schema ------------------------------------------------------------------------------
    def lead(self, s: dict) -> str:
        """The fixed text every rendering of ``s`` starts with."""
        if "const" in s:
            return json.dumps(s["const"], ensure_ascii=False)
        t = s.get("type")
        if t == "object":
            props = list(s.get("properties", {}).items())
            if not props:
                return "{"
            k, sub = props[0]
            return "{" + json.dumps(k) + ": " + self.lead(sub)
        if t == "array":
            return "[" + (self.lead(s["items"]) if s.get("minItems", 0) >= 1 and "items" in s else "")
        if t == "string":
            return '"'
        return ""

    def value(self, s: dict) -> None:
        if "anyOf" in s:
            branches = s["anyOf"]
            leads = [self.lead(b) for b in branches]
            if len(set(leads)) != len(leads):
                raise SchemaError("anyOf branches must start with distinct fixed text")
            i = self.choose(leads)
            self.pending = leads[i]
            self.value(branches[i])
            return
        if "const" in s:
            self.force(json.dumps(s["const"], ensure_ascii=False))
            return
        if "enum" in s:
            self.choose([json.dumps(v, ensure_ascii=False) for v in s["enum"]])
            return
        t = s.get("type")
        if t == "object":
            self.force("{")
            for i, (k, sub) in enumerate(s.get("properties", {}).items()):
                self.force((", " if i else "") + json.dumps(k) + ": ")
                self.value(sub)
            self.force("}")
        elif t == "array":
            lo, hi = int(s.get("minItems", 0)), int(s.get("maxItems", 8))
            if lo < 1 or hi < lo:
                raise SchemaError("arrays need 1 <= minItems <= maxItems")
            self.force("[")
            for n in range(hi):
                if n >= lo:  # another item, or close the array
                    if self.choose(["]", ", "]) == 0:
                        return
                elif n:
                    self.force(", ")
                self.value(s["items"])
            self.force("]")
        elif t == "boolean":
            self.choose(["true", "false"])
        elif t == "string":
            self.string(int(s.get("maxLength", 200)))
        else:
            raise SchemaError(f"unsupported schema construct: {sorted(s)}")

    def string(self, max_chars: int) -> None:
        self.force('"')
        chars = 0
        safe, quote = self.p.safe_ids, self.p.quote_id
        while chars < max_chars and not self.dec.full:
            allowed = safe if chars == 0 else safe + [quote]
            tok = self.dec.draw(allowed)
            if tok == quote:
                self.dec.push([tok], sampled=True)
                return
            self.dec.push([tok], sampled=True)
            chars += len(self.p.piece(tok))
        self.force('"')


class HFPolicy:
    """A causal LM (+ optional LoRA) as a ChatClient with schema-guided decoding (module docstring).

    Args:
        model, tokenizer: a loaded model (e.g. a PEFT-wrapped copy being trained) and its tokenizer.
        model_id: the ledger id (default ``gemma-3-270m-q4_k_m`` = the price-book id of the base).
        context_tokens: prompt plus output tokens per call.
        seed: seed of the sampling generator.

    ``recording``: when True, each call appends a :class:`Generation` to ``generations``.
    Raises :class:`LLMError` when generation fails; ``SchemaError`` (a ValueError) for a schema
    outside the supported subset.
    """

    def __init__(self, model, tokenizer, *, model_id: str = MODEL_ID, context_tokens: int = 8192, seed: int = 0):
        import torch

        self.model = model
        self.tokenizer = tokenizer
        self.model_id = model_id
        self._context_tokens = int(context_tokens)
        self.generator = torch.Generator(device="cpu").manual_seed(int(seed))
        self.lock = threading.Lock()
        self.recording = False
        self.generations: list[Generation] = []
        self._safe: list[int] | None = None
        self._pieces: dict[int, str] = {}
        self.quote_id = self._single('"')
        self.eos_ids = {i for i in (tokenizer.eos_token_id,) if i is not None}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        self.eos_ids |= {gen_eos} if isinstance(gen_eos, int) else set(gen_eos or [])

    @classmethod
    def load(cls, adapter: str | os.PathLike | None = None, *, device: str = "cpu", seed: int = 0) -> "HFPolicy":
        """The packaged Gemma 3 270M in transformers, with the LoRA ``adapter`` merged in when given
        (as saved by ``memfrontier train orchestrator``). Raises :class:`LLMError` when loading fails."""
        from ...llm.hf import default_model_id, load_causal_lm

        lm, tok = load_causal_lm(None, device=device, copy=True)
        if adapter is not None:
            if not os.path.isfile(os.path.join(os.fspath(adapter), "adapter_config.json")):
                raise LLMError(f"{adapter} is not a PEFT adapter directory (no adapter_config.json)")
            require_extra("train", "peft", feature="MemPilot's trained orchestrator")
            from peft import PeftModel

            try:
                lm = PeftModel.from_pretrained(lm, os.fspath(adapter)).merge_and_unload()
            except (OSError, ValueError, KeyError, RuntimeError) as e:
                raise LLMError(f"could not apply the adapter {adapter}: {e}") from e
        lm.eval()
        return cls(lm, tok, model_id=MODEL_ID if adapter is None else default_model_id(None, adapter), seed=seed)

    # -- tokens ------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def piece(self, tok: int) -> str:
        if tok not in self._pieces:
            self._pieces[tok] = self.tokenizer.decode([tok])
        return self._pieces[tok]

    def _single(self, text: str) -> int:
        ids = self.encode(text)
        if len(ids) != 1:
            raise LLMError(f"the tokenizer splits {text!r} into {len(ids)} tokens; schema-guided decoding needs one")
        return ids[0]

    @property
    def safe_ids(self) -> list[int]:
        """Tokens allowed inside a string: non-special, non-empty, without ``< > " \\`` or line breaks."""
        if self._safe is None:
            tok = self.tokenizer
            special = set(tok.all_special_ids)
            texts = tok.batch_decode([[i] for i in range(len(tok))])
            self._safe = [
                i
                for i, t in enumerate(texts)
                if i not in special
                and t
                and not (set(t) & _FORBIDDEN)
                and t.isprintable()
                and not (t.startswith("<") or "unused" in t)
            ]
        return self._safe

    # -- ChatClient --------------------------------------------------------------------------
    @property
    def context_tokens(self) -> int:
        return self._context_tokens

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text)) if text else 0

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
        """Generate after :func:`render_prompt` ``(messages)``: schema-guided with ``json_schema``,
        else free decoding until EOS, a ``stop`` string or (``single_line``) the end of the first line."""
        prompt = render_prompt(messages)
        ledger = current_ledger()
        return await asyncio.to_thread(
            self._complete_sync, prompt, max_tokens, temperature, json_schema, stop, single_line, ledger
        )

    def _complete_sync(self, prompt, max_tokens, temperature, schema, stop, single_line, ledger) -> Completion:
        max_tokens = max(1, min(int(max_tokens), self._context_tokens - _MIN_PROMPT_TOKENS))
        ids = list(self.tokenizer(prompt)["input_ids"])
        budget = self._context_tokens - max_tokens
        if len(ids) > budget:
            ids = ids[:1] + ids[len(ids) - (budget - 1) :]
            if ledger is not None:
                ledger.count("truncated_prompt")
        with self.lock:
            try:
                dec = _Decoder(self, ids, temperature, max_tokens)
                if schema is not None:
                    _SchemaWalker(self, dec).value(schema)
                else:
                    self._free(dec, stop, single_line)
            except RuntimeError as e:
                raise LLMError(f"{self.model_id}: generation failed: {e}") from e
        text = self.tokenizer.decode(dec.out, skip_special_tokens=True)
        if stop:
            cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
            text = text[:cut] if cut >= 0 else text
        if single_line:
            text = next((line.strip() for line in text.splitlines() if line.strip()), "")
        if self.recording:
            self.generations.append(Generation(list(ids), list(dec.out), list(dec.sampled)))
        return Completion(
            text=text,
            model_id=self.model_id,
            input_tokens=len(ids),
            output_tokens=len(dec.out),
            finish_reason="length" if dec.full else "stop",
        )

    def _free(self, dec: _Decoder, stop: list[str] | None, single_line: bool) -> None:
        text = ""
        while not dec.full:
            tok = dec.draw(None)
            if tok in self.eos_ids:
                return
            dec.push([tok], sampled=True)
            text += self.piece(tok)
            if stop and any(s and s in text for s in stop):
                return
            if single_line and "\n" in text.lstrip():
                return


__all__ = ["Generation", "HFPolicy", "SchemaError"]
