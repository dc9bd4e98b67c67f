"""MemoryCPT (arXiv 2608.04843): episodic + semantic memory built offline by four validated model
roles (:mod:`memfrontier.strategies.memorycpt.construction.episodic`), online RRF over both indexes and a query-aware Fine
Summary read by the frozen answerer (:mod:`.pipeline`). Training: :mod:`memfrontier.train.qar`
(LoRA-B, GRPO) and :mod:`memfrontier.train.lora_sft` (LoRA-A, SFT)."""

from .config import ABLATIONS, MemoryCPTConfig
from .pipeline import MemoryCPT

__all__ = ["ABLATIONS", "MemoryCPT", "MemoryCPTConfig"]
