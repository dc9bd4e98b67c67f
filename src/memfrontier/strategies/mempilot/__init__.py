"""MemPilot (arXiv 2610.06830): a multi-step orchestrator that Retrieves from a compressed bank or
Curates raw chunks through a priced pool of LLMs/VLMs.

:mod:`.protocol` holds the tools and the action format, :mod:`.prompts` the versioned prompts,
:mod:`.views` the dual-view memory at query time, :mod:`.orchestrator` the loop and its accounting,
:mod:`.pipeline` the :class:`MemPilot` strategy, :mod:`.accounting` the format gate, :mod:`.policy` the LoRA policy, :mod:`.pool` the priced model pool.
Rewards and training live in
:mod:`memfrontier.train.mempilot_reward` and :mod:`memfrontier.train.mempilot_trainer`.
"""

from .config import MemPilotConfig
from .pipeline import ANSWER_MODES, MemPilot
from .prompts import PROMPT_VERSION

__all__ = ["ANSWER_MODES", "PROMPT_VERSION", "MemPilot", "MemPilotConfig"]
