"""memfrontier: long-term memory for LLM agents with measured quality, cost and latency."""

from .core.version import __version__  # noqa: F401  (the public version attribute)

__all__ = ["Memory", "AsyncMemory", "Answer"]


def __getattr__(name):  # lazy: importing the package must not load models or heavy deps
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(name)
