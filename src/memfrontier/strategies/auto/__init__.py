"""``auto``: a router across strategy configurations (pick the memory strategy per question under
a preference and a hard budget, from a router trained on a frontier's per-question records).

:mod:`.features` the question's features before any model call, :mod:`.router` the versioned router
file and its predictions, :mod:`.decision` the choice, :mod:`.pipeline` the strategy; training is
:mod:`memfrontier.train.strategy_router`.
"""

from .config import AutoConfig
from .decision import Decision, Prediction, Scales, decide, utility
from .pipeline import PROMPT_VERSION, Auto
from .router import ROUTER_VERSION, Router, RouterFile, RouterFileError, read_router_file, write_router_file

__all__ = [
    "PROMPT_VERSION",
    "ROUTER_VERSION",
    "Auto",
    "AutoConfig",
    "Decision",
    "Prediction",
    "Router",
    "RouterFile",
    "RouterFileError",
    "Scales",
    "decide",
    "read_router_file",
    "utility",
    "write_router_file",
]
