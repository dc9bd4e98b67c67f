"""MemoryCPT's cost-aware reward for the query-aware summarizer (QAR, LoRA-B).

- cost proxy C(q, m_q) = |m_q| (p_sum^out + p_ans^in) + |y| p_ans^out       (MemoryCPT Eq. 14)
- normalised cost  C~ = min(1, C / C_ref)                                    (Eq. 15)
- C_ref from a reference summary of 60 tokens and an answer of 8 tokens     (Eq. 19: 1.392e-5 USD
  with the paper's prices p_7B^out = 0.10, p_14B^in = 0.10, p_14B^out = 0.24 USD per Mtok)
- reward R = alpha F1 + (1 - alpha)(1 - C~), alpha = 0.8 by default        (Eq. 16)

Prices come from the price book's roles ``memorycpt.summarizer`` (output price) and
``memorycpt.answerer`` (input and output prices), so a run priced with another book is rewarded
with that book's prices.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.pricebook import PriceBook

REF_SUMMARY_TOKENS = 60  # MemoryCPT Eq. 19
REF_ANSWER_TOKENS = 8
DEFAULT_ALPHA = 0.8  # MemoryCPT Sec. 4 / App. B


@dataclass(frozen=True)
class SummaryCostModel:
    """Token prices (USD per million tokens) of the two online roles that a summary drives."""

    summarizer_out_usd_per_mtok: float
    answerer_in_usd_per_mtok: float
    answerer_out_usd_per_mtok: float

    @classmethod
    def from_pricebook(cls, book: PriceBook) -> "SummaryCostModel":
        """Prices of roles ``memorycpt.summarizer`` / ``memorycpt.answerer``; raises UnpricedModelError."""
        summ = book.for_role("memorycpt.summarizer")
        ans = book.for_role("memorycpt.answerer")
        return cls(summ.output_usd_per_mtok, ans.input_usd_per_mtok, ans.output_usd_per_mtok)

    def cost_usd(self, summary_tokens: int, answer_tokens: int) -> float:
        """C(q, m_q) in USD; MemoryCPT Eq. 14. Raises ValueError on negative token counts."""
        if summary_tokens < 0 or answer_tokens < 0:
            raise ValueError(f"token counts must be >= 0, got {summary_tokens}, {answer_tokens}")
        per_summary_token = self.summarizer_out_usd_per_mtok + self.answerer_in_usd_per_mtok
        return 1e-6 * (summary_tokens * per_summary_token + answer_tokens * self.answerer_out_usd_per_mtok)

    def reference_usd(self) -> float:
        """C_ref: the Eq. 14 cost of a 60-token summary and an 8-token answer (MemoryCPT Eq. 19)."""
        return self.cost_usd(REF_SUMMARY_TOKENS, REF_ANSWER_TOKENS)

    def normalised_cost(self, summary_tokens: int, answer_tokens: int) -> float:
        """C~ = min(1, C / C_ref) in [0, 1]; MemoryCPT Eq. 15."""
        ref = self.reference_usd()
        if ref <= 0:
            return 0.0
        return min(1.0, self.cost_usd(summary_tokens, answer_tokens) / ref)

    def reward(self, f1: float, summary_tokens: int, answer_tokens: int, alpha: float = DEFAULT_ALPHA) -> float:
        """R = alpha F1 + (1 - alpha)(1 - C~); MemoryCPT Eq. 16. Raises ValueError for alpha or F1 outside [0, 1]."""
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if not 0.0 <= f1 <= 1.0:
            raise ValueError(f"F1 must be in [0, 1], got {f1}")
        return alpha * f1 + (1.0 - alpha) * (1.0 - self.normalised_cost(summary_tokens, answer_tokens))
