"""PPO for the BudgetMem tier router (BudgetMem Sec. 4.3 and App. A.4).

One question is one episode with a single reward at its end (a contextual bandit over the joint
tier choice): the episode's log-probability is the sum of its tier decisions' log-probabilities,
its return is its reward (Eq. 7) and its advantage is ``reward - V(s_0)``, with V taken on the
first state (the filter decision).

Defaults follow the paper / released code: clip 0.2, value clipping 0.2, value coef 0.5,
entropy coef 0.01, Adam lr 3e-4 (eps 1e-5), grad-norm clip 0.5, 4 epochs per update, 32
questions per update. Sampling while training, argmax at test (:meth:`TierRouter.decide`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..strategies.budgetmem.router import TierRouter, _as_tensor, log_probs

MAX_LOG_RATIO = 10.0  # log-ratio clamp: keeps exp() finite on a stale batch


def ppo_losses(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip: float = 0.2,
    value_clip: float = 0.2,
    value_coef: float = 0.5,
    entropy_coef: float = 0.01,
) -> dict[str, torch.Tensor]:
    """PPO clipped losses over a batch of episodes (all inputs shape (B,)).

    - ``ratio = exp(clamp(new_logp - old_logp, -10, 10))`` (joint log-probs of each episode);
    - ``policy_loss = -mean(min(ratio * A, clamp(ratio, 1 - clip, 1 + clip) * A))``;
    - ``value_loss = mean(max((V - R)^2, (V_old + clamp(V - V_old, -value_clip, value_clip) - R)^2))``;
    - ``entropy_loss = -mean(entropy)`` (``entropy``: per-episode mean entropy of its decisions, nats);
    - ``total = policy_loss + value_coef * value_loss + entropy_coef * entropy_loss``
      (so a higher entropy lowers the loss: an exploration bonus).

    Returns ``policy_loss, value_loss, entropy_loss, total`` (scalars, differentiable),
    ``ratio`` (B,) and ``clip_frac`` (share of episodes with ``|ratio - 1| > clip``).
    """
    log_ratio = torch.clamp(new_logp - old_logp, -MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    surr = ratio * advantages
    surr_clipped = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
    policy_loss = -torch.min(surr, surr_clipped).mean()

    v_clipped = old_values + torch.clamp(new_values - old_values, -value_clip, value_clip)
    value_loss = torch.max((new_values - returns) ** 2, (v_clipped - returns) ** 2).mean()

    entropy_loss = -entropy.mean()
    total = policy_loss + value_coef * value_loss + entropy_coef * entropy_loss
    clip_frac = ((ratio - 1.0).abs() > clip).float().mean()
    return {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy_loss": entropy_loss,
        "total": total,
        "ratio": ratio,
        "clip_frac": clip_frac,
    }


def compute_advantages(
    rewards: torch.Tensor, values: torch.Tensor, normalize: bool = True, eps: float = 1e-8
) -> tuple[torch.Tensor, torch.Tensor]:
    """One-step episodes: ``A = r - V(s_0)``, ``returns = r``.

    With ``normalize``, A is standardised over the batch, ``(A - mean) / std`` with the
    population std, when the batch has more than one episode and ``std > eps``.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    values = torch.as_tensor(values, dtype=torch.float32)
    adv = rewards - values
    if normalize and adv.numel() > 1:
        std = adv.std(correction=0)
        if std > eps:
            adv = (adv - adv.mean()) / std
    return adv, rewards.clone()


@dataclass
class Decision:
    """One tier decision as taken during the rollout."""

    module: str
    query_emb: np.ndarray | torch.Tensor  # (E,)
    input_emb: np.ndarray | torch.Tensor  # (E,) mean embedding of the module input
    tier_idx: int  # index into TIERS
    old_logp: float  # log-prob of tier_idx under the rollout policy


@dataclass
class Episode:
    """One question: its decisions in pipeline order (the first is s_0), V(s_0) and reward (Eq. 7)."""

    decisions: list[Decision]
    old_value: float
    reward: float


class PPOTrainer:
    """PPO updates of a :class:`TierRouter` from finished episodes."""

    def __init__(
        self,
        router: TierRouter,
        lr: float = 3e-4,
        epochs: int = 4,
        batch_questions: int = 32,
        max_grad_norm: float = 0.5,
        seed: int = 42,
        *,
        clip: float = 0.2,
        value_clip: float = 0.2,
        value_coef: float = 0.5,
        entropy_coef: float = 0.01,
        adam_eps: float = 1e-5,
        normalize_advantages: bool = True,
    ) -> None:
        self.router = router
        self.epochs = int(epochs)
        self.batch_questions = int(batch_questions)
        self.max_grad_norm = float(max_grad_norm)
        self.clip, self.value_clip = float(clip), float(value_clip)
        self.value_coef, self.entropy_coef = float(value_coef), float(entropy_coef)
        self.normalize_advantages = normalize_advantages
        self.generator = torch.Generator().manual_seed(int(seed))
        self.optimizer = torch.optim.Adam(router.parameters(), lr=lr, eps=adam_eps)

    # ------------------------------------------------------------------ rollout helpers
    def sample(self, query_emb, input_emb, modules: Sequence[str]) -> tuple[list[Decision], list[float]]:
        """Sample tiers (training policy) for ``modules`` sharing one state.

        Returns the :class:`Decision` records and the state values V(s) (one per module).
        """
        out = self.router.decide_many(query_emb, input_emb, modules, greedy=False, generator=self.generator)
        q, x = _as_tensor(query_emb), _as_tensor(input_emb)
        decisions = [
            Decision(m, q, x, self.router.tiers.index(tier), logp) for m, (tier, logp, _v) in zip(modules, out)
        ]
        return decisions, [v for _t, _lp, v in out]

    # ------------------------------------------------------------------ update
    def update(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Run PPO on ``episodes``, ``batch_questions`` at a time, ``epochs`` passes each.

        Returns means over all optimisation steps of ``policy_loss``, ``value_loss``, ``entropy``
        (nats per decision), ``clip_frac``, ``approx_kl``, ``grad_norm``, plus ``mean_reward``,
        ``std_reward`` (population) over the episodes, ``n_episodes`` and ``n_steps``.
        """
        if not episodes:
            raise ValueError("PPOTrainer.update needs at least one episode")
        for i, ep in enumerate(episodes):
            if not ep.decisions:
                raise ValueError(f"episode {i} has no decisions")
        sums: dict[str, float] = {}
        n_steps = 0
        for start in range(0, len(episodes), self.batch_questions):
            for stats in self._update_batch(episodes[start : start + self.batch_questions]):
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_steps += 1
        rewards = np.array([ep.reward for ep in episodes], dtype=np.float64)
        out = {k: v / n_steps for k, v in sums.items()}
        out.update(
            mean_reward=float(rewards.mean()),
            std_reward=float(rewards.std()),
            n_episodes=len(episodes),
            n_steps=n_steps,
        )
        return out

    def _update_batch(self, episodes: Sequence[Episode]):
        router = self.router
        flat = [(e, d) for e, ep in enumerate(episodes) for d in ep.decisions]
        q = torch.stack([_as_tensor(d.query_emb) for _e, d in flat])
        x = torch.stack([_as_tensor(d.input_emb) for _e, d in flat])
        mod = torch.tensor([router.module_index(d.module) for _e, d in flat], dtype=torch.long)
        act = torch.tensor([d.tier_idx for _e, d in flat], dtype=torch.long)
        ep_idx = torch.tensor([e for e, _d in flat], dtype=torch.long)
        n_ep = len(episodes)
        counts = torch.zeros(n_ep).index_add_(0, ep_idx, torch.ones(len(flat)))
        first = torch.tensor(np.cumsum([0] + [len(ep.decisions) for ep in episodes[:-1]]), dtype=torch.long)

        old_logp = torch.zeros(n_ep).index_add_(
            0, ep_idx, torch.tensor([d.old_logp for _e, d in flat], dtype=torch.float32)
        )
        old_values = torch.tensor([ep.old_value for ep in episodes], dtype=torch.float32)
        rewards = torch.tensor([ep.reward for ep in episodes], dtype=torch.float32)
        advantages, returns = compute_advantages(rewards, old_values, normalize=self.normalize_advantages)

        router.train()
        for _ in range(self.epochs):
            logits, values = router(q, x, mod)
            logp_all = log_probs(logits)
            logp = logp_all.gather(-1, act.unsqueeze(-1)).squeeze(-1)
            new_logp = torch.zeros(n_ep).index_add(0, ep_idx, logp)
            ent = -(logp_all.exp() * logp_all).sum(-1)
            ent_ep = torch.zeros(n_ep).index_add(0, ep_idx, ent) / counts
            losses = ppo_losses(
                new_logp,
                old_logp,
                advantages,
                values[first],
                old_values,
                returns,
                ent_ep,
                clip=self.clip,
                value_clip=self.value_clip,
                value_coef=self.value_coef,
                entropy_coef=self.entropy_coef,
            )
            self.optimizer.zero_grad(set_to_none=True)
            losses["total"].backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(router.parameters(), self.max_grad_norm)
            self.optimizer.step()
            with torch.no_grad():
                log_ratio = new_logp - old_logp
                approx_kl = ((torch.exp(log_ratio) - 1) - log_ratio).mean()
            yield {
                "policy_loss": losses["policy_loss"].item(),
                "value_loss": losses["value_loss"].item(),
                "entropy": ent_ep.mean().item(),
                "clip_frac": float(losses["clip_frac"]),
                "approx_kl": float(approx_kl),
                "grad_norm": float(grad_norm),
            }
        router.eval()
