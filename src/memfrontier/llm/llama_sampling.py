"""Greedy decoding under a grammar, with the grammar checked after the choice: the token
llama-cpp-python's own sampler chain picks, for a fraction of the cost.

llama-cpp-python (pinned 0.3.36) builds the chain ``penalties -> grammar -> greedy``: at every
step the grammar is matched against *all* n_vocab candidates -- 262,144 for Gemma 3 -- which
costs more than the forward pass itself (measured on two CPU cores: ~115-140 ms per token with a
JSON-schema grammar against ~36 ms without). Greedy decoding only needs the grammar's verdict
on the token it picks, which is what llama.cpp's own ``common_sampler`` does by default
(``grammar_first = false``):

1. the argmax of the penalised logits is taken (``penalties -> greedy``, no grammar);
2. the grammar alone is asked about that one token;
3. only when it rejects it are the candidates masked by the grammar and the argmax taken again;
4. the chosen token is accepted by both (penalty history, grammar state).

The token is the same as the chain's: the grammar only sets rejected candidates to -inf (and a
penalty leaves -inf at -inf, so the two commute), hence an accepted argmax over all candidates
is also the argmax over the accepted ones, ties included (both take the lowest id among equal
maxima). Sampling at a temperature above 0 keeps llama-cpp-python's chain.

:func:`install` wraps one ``Llama`` object's ``_init_sampler`` so that its greedy completions
with a grammar (``create_completion(..., temperature=0, grammar=...)``) use
:class:`GreedyGrammarSampler`; everything else is built by the original method.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

__all__ = ["GreedyGrammarSampler", "install"]


class GreedyGrammarSampler:
    """The sampler object ``Llama.generate`` uses (``sample(ctx, idx) -> token``) for greedy
    decoding with ``grammar`` (a ``llama_cpp.LlamaGrammar``) and llama-cpp-python's repetition
    penalties (``penalty_last_n`` tokens; ``penalty_repeat`` 1.0 = off). ``checks`` and
    ``resamples`` count the tokens chosen and how many of them needed the full grammar mask."""

    def __init__(self, llm, grammar, *, penalty_repeat: float, penalty_freq: float = 0.0, penalty_present: float = 0.0):
        import llama_cpp
        from llama_cpp import _internals

        self._lib = llama_cpp
        self.n_vocab = int(llm._n_vocab)
        self.chain = _internals.LlamaSampler()  # penalties -> greedy, as the original chain minus the grammar
        self.chain.add_penalties(
            n_vocab=self.n_vocab,
            penalty_last_n=llm.last_n_tokens_size,
            penalty_repeat=penalty_repeat,
            penalty_freq=penalty_freq,
            penalty_present=penalty_present,
        )
        self.chain.add_greedy()
        self.grammar = _internals.LlamaSampler()
        self.grammar.add_grammar(llm._model, grammar)
        self.cur = _internals.LlamaTokenDataArray(n_vocab=self.n_vocab)
        self._one = (llama_cpp.llama_token_data * 1)()
        self._one_arr = llama_cpp.llama_token_data_array(
            data=ctypes.cast(self._one, llama_cpp.llama_token_data_p), size=1, selected=-1, sorted=False
        )
        self.checks = 0
        self.resamples = 0

    def _argmax(self, logits, with_grammar: bool) -> int:
        import numpy as np

        lib = self._lib
        self.cur.copy_logits(np.ctypeslib.as_array(logits, shape=(self.n_vocab,)))
        self.cur.candidates.selected = -1
        if with_grammar:
            lib.llama_sampler_apply(self.grammar.sampler, ctypes.byref(self.cur.candidates))
        lib.llama_sampler_apply(self.chain.sampler, ctypes.byref(self.cur.candidates))
        sel = int(self.cur.candidates.selected)
        if sel < 0:
            raise RuntimeError("llama.cpp's greedy sampler selected no token")
        return int(self.cur.candidates.data[sel].id)

    def _grammar_accepts(self, token: int) -> bool:
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 0.0, 0.0
        self._one_arr.size, self._one_arr.selected, self._one_arr.sorted = 1, -1, False
        self._lib.llama_sampler_apply(self.grammar.sampler, ctypes.byref(self._one_arr))
        return not math.isinf(self._one[0].logit)

    def sample(self, ctx, idx: int = -1) -> int:
        """The greedy token at output ``idx`` of ``ctx`` (a llama-cpp-python ``LlamaContext``)
        that the grammar accepts; it is accepted into the penalty history and the grammar."""
        logits = self._lib.llama_get_logits_ith(ctx.ctx, idx)
        token = self._argmax(logits, with_grammar=False)
        self.checks += 1
        if not self._grammar_accepts(token):
            self.resamples += 1
            token = self._argmax(logits, with_grammar=True)
        self._lib.llama_sampler_accept(self.grammar.sampler, token)
        self._lib.llama_sampler_accept(self.chain.sampler, token)
        return token

    def close(self) -> None:
        self.chain.close()
        self.grammar.close()


def install(llm) -> None:
    """Make ``llm`` (a ``llama_cpp.Llama``) build a :class:`GreedyGrammarSampler` for greedy
    decoding with a grammar (no logits processor, no mirostat); other sampling is unchanged.
    Idempotent. The sampler of the last generation stays in ``llm._sampler``, as llama-cpp-python
    leaves it."""
    if getattr(llm, "_greedy_grammar_installed", False):
        return
    original = llm._init_sampler

    def init_sampler(**kw: Any):
        if (
            kw.get("temp") == 0.0
            and kw.get("grammar") is not None
            and kw.get("logits_processor") is None
            and not kw.get("mirostat_mode")
        ):
            return GreedyGrammarSampler(
                llm,
                kw["grammar"],
                penalty_repeat=kw.get("repeat_penalty", 1.0),
                penalty_freq=kw.get("frequency_penalty", 0.0),
                penalty_present=kw.get("presence_penalty", 0.0),
            )
        return original(**kw)

    llm._init_sampler = init_sampler
    llm._greedy_grammar_installed = True
