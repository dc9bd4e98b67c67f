"""BudgetMem budget-tier router: a small actor-critic MLP (BudgetMem Sec. 4.3, "Policy, state,
and action").

At each module invocation k the state s_k is (i) the query embedding, (ii) the mean embedding of
the module's input (the previous module's output) and (iii) a learned per-module embedding,
initialised from an embedding of the module's one-sentence description. The action is a tier in
``TIERS`` (Low / Mid / High), drawn from a categorical over 3 logits shared by all modules.
A value head estimates V(s); PPO uses it on the first state (the filter decision) only, since one
question is one single-step episode.

Decision order per question (the pipeline order): ``filter`` from (query, retrieved chunks);
``entity``, ``temporal``, ``topic`` from (query, filtered chunks), decided together
(:meth:`TierRouter.decide_many`); ``summary`` from (query, extraction output).

Embeddings are computed by the caller (e.g. :class:`memfrontier.embed.minilm.MiniLMEmbedder`,
384-d); the router never loads an embedding model. Use :meth:`TierRouter.from_embedder` to
initialise module embeddings from :data:`MODULE_DESCRIPTIONS`.

Speed: a question's 5 decisions (3 forwards with :meth:`TierRouter.decide_many` for the
extraction modules) take about 1.2 ms p50 on one CPU thread (``benchmarks/bench_router.py``).
The router is ~0.5M parameters and gains nothing from intra-op threads; on an oversubscribed
machine multi-threaded tiny matmuls wait on descheduled workers (p95 > 100 ms measured at load
average 4.5 on 2 cores), so serve it with ``torch.set_num_threads(1)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...core.errors import ArtifactError
from .config import MODULES, TIERS

CHECKPOINT_FORMAT = "memfrontier.budgetmem.tier_router"
CHECKPOINT_VERSION = 1

MODULE_DESCRIPTIONS: dict[str, str] = {
    "filter": "Filter module: scores the retrieved memory chunks for relevance to the query and keeps the most useful ones.",
    "entity": "Entity module: extracts relations between people, objects and places in the chunks that matter for the query.",
    "temporal": "Temporal module: extracts dates, durations and the order of events in the chunks that matter for the query.",
    "topic": "Topic module: extracts the topics discussed in the chunks and how the conversation moves between them.",
    "summary": "Summary module: merges the extracted relations and evidence into a compact memory for answering the query.",
}


def router_dir_name(lam: float) -> str:
    """The folder name of a router trained at ``lam`` (``lambda_0``, ``lambda_0.3``): the sweep looks
    for ``<router-dir>/<this>/router_best.pt``."""
    return f"lambda_{lam:g}"


class RouterCheckpointError(ArtifactError):
    """A router checkpoint is unreadable or does not match the configured pipeline."""


def _as_tensor(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to(dtype=torch.float32)
    return torch.as_tensor(np.asarray(x, dtype=np.float32))


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    """Log-softmax over the last dim as ``logits - logsumexp``: torch 2.13's CPU ``log_softmax`` on
    a few rows of 3 takes milliseconds with >1 intra-op thread, this takes microseconds."""
    return logits - logits.logsumexp(dim=-1, keepdim=True)


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain=gain)
    nn.init.zeros_(layer.bias)
    return layer


class TierRouter(nn.Module):
    """Actor-critic tier router.

    Network (our choice, in the spirit of the released one): ``ReLU(Linear(2E->H))`` on
    [query ; input], ``ReLU(Linear(E->H))`` on the module embedding, concatenated ->
    ``ReLU(Linear(2H->H))`` -> policy head ``Linear(H->H/2), ReLU, Linear(H/2->3)`` and value head
    ``Linear(H->H/2), ReLU, Linear(H/2->1)``. Orthogonal init with gain sqrt(2), zero biases;
    the policy output layer uses gain 0.01 so the initial policy is close to uniform.

    Args:
        module_init: tensor (len(modules), emb_dim) of initial module embeddings (the caller
            embeds the descriptions); ``None`` gives random unit vectors (tests).
        modules: module names in pipeline order.
        emb_dim: embedding size E of queries, inputs and module descriptors.
        hidden: hidden size H.
        descriptions: module name -> description text (kept in the checkpoint, for provenance).
    """

    def __init__(
        self,
        module_init: torch.Tensor | np.ndarray | None = None,
        *,
        modules: Sequence[str] = MODULES,
        emb_dim: int = 384,
        hidden: int = 256,
        descriptions: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.module_names: tuple[str, ...] = tuple(modules)
        if len(set(self.module_names)) != len(self.module_names) or not self.module_names:
            raise ValueError(f"module names must be unique and non-empty, got {self.module_names}")
        self.tiers: tuple[str, ...] = TIERS
        self.emb_dim = int(emb_dim)
        self.hidden = int(hidden)
        self.descriptions = (
            dict(descriptions)
            if descriptions is not None
            else {m: MODULE_DESCRIPTIONS.get(m, m) for m in self.module_names}
        )
        self._index = {m: i for i, m in enumerate(self.module_names)}

        if module_init is None:
            init = torch.randn(len(self.module_names), self.emb_dim)
            init = init / init.norm(dim=-1, keepdim=True)
        else:
            init = _as_tensor(module_init).clone()
        if tuple(init.shape) != (len(self.module_names), self.emb_dim):
            raise ValueError(
                f"module_init has shape {tuple(init.shape)}, expected ({len(self.module_names)}, {self.emb_dim})"
            )
        self.module_emb = nn.Parameter(init)

        g = math.sqrt(2.0)
        h, h2 = self.hidden, max(1, self.hidden // 2)
        self.state_proj = _orthogonal(nn.Linear(2 * self.emb_dim, h), g)
        self.module_proj = _orthogonal(nn.Linear(self.emb_dim, h), g)
        self.trunk = _orthogonal(nn.Linear(2 * h, h), g)
        self.policy_head = nn.Sequential(
            _orthogonal(nn.Linear(h, h2), g), nn.ReLU(), _orthogonal(nn.Linear(h2, len(TIERS)), 0.01)
        )
        self.value_head = nn.Sequential(_orthogonal(nn.Linear(h, h2), g), nn.ReLU(), _orthogonal(nn.Linear(h2, 1), 1.0))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_embedder(
        cls,
        encode: Callable[[list[str]], np.ndarray],
        *,
        modules: Sequence[str] = MODULES,
        descriptions: Mapping[str, str] = MODULE_DESCRIPTIONS,
        hidden: int = 256,
    ) -> TierRouter:
        """Initialise module embeddings by ``encode([description of each module])``.

        ``encode`` is e.g. ``MiniLMEmbedder().encode`` (list[str] -> float array (n, E)).
        """
        missing = [m for m in modules if m not in descriptions]
        if missing:
            raise ValueError(f"no description for modules {missing}")
        texts = [descriptions[m] for m in modules]
        init = np.asarray(encode(texts), dtype=np.float32)
        return cls(
            init,
            modules=modules,
            emb_dim=init.shape[1],
            hidden=hidden,
            descriptions={m: descriptions[m] for m in modules},
        )

    # ------------------------------------------------------------------ policy
    def module_index(self, module: str) -> int:
        try:
            return self._index[module]
        except KeyError:
            raise ValueError(f"unknown module {module!r}; router modules: {', '.join(self.module_names)}") from None

    def forward(
        self, query_emb: torch.Tensor, input_emb: torch.Tensor, module_idx
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits over ``TIERS`` (shape (..., 3)) and state value (shape (...)).

        ``query_emb``, ``input_emb``: (..., E). ``module_idx``: int, module name, or LongTensor (...).
        """
        if isinstance(module_idx, str):
            module_idx = self.module_index(module_idx)
        if query_emb.shape[-1] != self.emb_dim or input_emb.shape[-1] != self.emb_dim:
            raise ValueError(
                f"embedding size mismatch: router expects {self.emb_dim}, got query {query_emb.shape[-1]}, "
                f"input {input_emb.shape[-1]}"
            )
        state = torch.relu(self.state_proj(torch.cat([query_emb, input_emb], dim=-1)))
        mod = torch.relu(self.module_proj(self.module_emb[module_idx]))
        if mod.shape != state.shape:
            mod = mod.expand_as(state)
        h = torch.relu(self.trunk(torch.cat([state, mod], dim=-1)))
        return self.policy_head(h), self.value_head(h).squeeze(-1)

    @torch.inference_mode()
    def decide_many(
        self,
        query_emb,
        input_emb,
        modules: Sequence[str],
        greedy: bool,
        generator: torch.Generator | None = None,
    ) -> list[tuple[str, float, float]]:
        """Tiers for several modules that share one state (e.g. entity / temporal / topic).

        Returns ``[(tier, logprob, value)]`` in the order of ``modules``: ``greedy`` takes the
        argmax (test time), else a categorical sample (training) using ``generator``.
        ``logprob`` is the natural-log probability of the chosen tier.
        """
        q = _as_tensor(query_emb).reshape(1, -1).expand(len(modules), -1)
        x = _as_tensor(input_emb).reshape(1, -1).expand(len(modules), -1)
        idx = torch.tensor([self.module_index(m) for m in modules], dtype=torch.long)
        logits, values = self.forward(q, x, idx)
        logp = log_probs(logits)
        if greedy:
            choice = logits.argmax(dim=-1)
        else:
            choice = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
        chosen = logp.gather(-1, choice.unsqueeze(-1)).squeeze(-1)
        return [(TIERS[int(c)], float(lp), float(v)) for c, lp, v in zip(choice, chosen, values)]

    def decide(
        self, query_emb, input_emb, module: str, greedy: bool, generator: torch.Generator | None = None
    ) -> tuple[str, float, float]:
        """Tier for one module: ``(tier, logprob, value)``; see :meth:`decide_many`."""
        return self.decide_many(query_emb, input_emb, [module], greedy, generator)[0]

    # ------------------------------------------------------------------ checkpoints
    def config(self) -> dict:
        return {
            "modules": list(self.module_names),
            "tiers": list(self.tiers),
            "emb_dim": self.emb_dim,
            "hidden": self.hidden,
            "descriptions": dict(self.descriptions),
        }

    def save(self, path: str | Path) -> None:
        """Write ``{format, version, config, state_dict}`` with ``torch.save``."""
        payload = {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "config": self.config(),
            "state_dict": {k: v.detach().cpu() for k, v in self.state_dict().items()},
        }
        torch.save(payload, Path(path))

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        expected_modules: Sequence[str] | None = MODULES,
        expected_emb_dim: int | None = 384,
    ) -> TierRouter:
        """Load a checkpoint written by :meth:`save` (``weights_only=True``).

        Raises :class:`RouterCheckpointError` if the file is not a router checkpoint, or its
        modules / tiers / embedding size differ from the configured ones (pass ``None`` to skip
        a check). A missing file raises ``FileNotFoundError``.
        """
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"router checkpoint not found: {path}")
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # pickle / zip errors differ by torch version
            raise RouterCheckpointError(f"{path} is not a readable router checkpoint: {exc}") from exc
        if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
            raise RouterCheckpointError(f"{path} is not a memfrontier tier-router checkpoint")
        if payload.get("version") != CHECKPOINT_VERSION:
            raise RouterCheckpointError(
                f"{path}: checkpoint version {payload.get('version')!r}, this code reads {CHECKPOINT_VERSION}"
            )
        cfg = payload.get("config")
        if not isinstance(cfg, dict) or not {"modules", "tiers", "emb_dim", "hidden"} <= cfg.keys():
            raise RouterCheckpointError(f"{path}: checkpoint config is missing or incomplete")
        if expected_modules is not None and list(cfg["modules"]) != list(expected_modules):
            raise RouterCheckpointError(
                f"{path}: router was trained for modules {list(cfg['modules'])} but the pipeline is "
                f"configured with {list(expected_modules)}"
            )
        if list(cfg["tiers"]) != list(TIERS):
            raise RouterCheckpointError(f"{path}: router tiers {list(cfg['tiers'])} differ from {list(TIERS)}")
        if expected_emb_dim is not None and int(cfg["emb_dim"]) != int(expected_emb_dim):
            raise RouterCheckpointError(
                f"{path}: router expects {cfg['emb_dim']}-d embeddings but the configured embedder gives "
                f"{expected_emb_dim}-d; retrain the router or use the embedder it was trained with"
            )
        try:
            state = payload["state_dict"]
            router = cls(
                state["module_emb"],
                modules=cfg["modules"],
                emb_dim=int(cfg["emb_dim"]),
                hidden=int(cfg["hidden"]),
                descriptions=cfg.get("descriptions"),
            )
            router.load_state_dict(state, strict=True)
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise RouterCheckpointError(f"{path}: weights do not fit the stored config: {exc}") from exc
        router.eval()
        return router
