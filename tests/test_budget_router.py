"""BudgetMem reward (Eq. 7-10), tier router and PPO: hand-computed values and a learning test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from memfrontier.strategies.budgetmem.router import (
    MODULES,
    TIERS,
    RouterCheckpointError,
    TierRouter,
)
from memfrontier.train.budget_reward import (
    BudgetRewardShaper,
    CostNormalizer,
    ScaleAligner,
    budget_reward,
)
from memfrontier.train.ppo import Episode, PPOTrainer, compute_advantages, ppo_losses


@pytest.fixture(autouse=True)
def _one_thread():
    """A tiny MLP gains nothing from intra-op threads; on a busy 2-core box they cost 10-100x."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------- Eq. 9


def test_cost_normalizer_hand_computed_quantiles():
    cn = CostNormalizer(window=2000)
    cn.update([1.0, 4.0, 9.0, 16.0, 25.0])  # sqrt -> 1, 2, 3, 4, 5
    # numpy linear: h = p/100 * (n-1); Q5 at h=0.2 -> 1 + 0.2*(2-1) = 1.2; Q95 at h=3.8 -> 4 + 0.8 = 4.8
    q5, q95 = cn.quantiles
    assert q5 == pytest.approx(1.2) and q95 == pytest.approx(4.8)
    assert cn.normalize(9.0) == pytest.approx(1 - (3 - 1.2) / 3.6)  # 0.5
    assert cn.normalize(4.0) == pytest.approx(1 - (2 - 1.2) / 3.6)  # 0.7778
    assert cn.normalize(1.0) == 1.0  # below Q5: clipped
    assert cn.normalize(0.0) == 1.0
    assert cn.normalize(25.0) == 0.0  # above Q95: clipped
    assert cn.normalize(100.0) == 0.0


def test_cost_normalizer_sliding_window_drops_oldest():
    cn = CostNormalizer(window=3)
    cn.update([1.0, 4.0])
    cn.update([9.0, 16.0])  # window -> [4, 9, 16], sqrt -> 2, 3, 4
    assert len(cn) == 3
    q5, q95 = cn.quantiles
    assert q5 == pytest.approx(2.1) and q95 == pytest.approx(3.9)  # h=0.1 and h=1.9
    assert cn.normalize(9.0) == pytest.approx(1 - (3 - 2.1) / 1.8)  # 0.5


def test_cost_normalizer_degenerate_windows():
    cn = CostNormalizer()
    with pytest.raises(ValueError, match="empty"):
        cn.normalize(1.0)
    cn.update([0.04])  # one value: Q5 == Q95 == 0.2 -> step at sqrt(c) = 0.2
    assert cn.normalize(0.04) == 1.0
    assert cn.normalize(0.01) == 1.0
    assert cn.normalize(0.05) == 0.0
    free = CostNormalizer()
    free.update([0.0] * 10)  # all tiers free (e.g. rule-based): any paid call is "expensive"
    assert free.normalize(0.0) == 1.0
    assert free.normalize(1e-6) == 0.0
    with pytest.raises(ValueError):
        free.update([-1.0])
    with pytest.raises(ValueError):
        free.normalize(float("nan"))


# --------------------------------------------------------------------------- Eq. 10 and Eq. 7


def test_scale_aligner_hand_computed():
    sa = ScaleAligner(window=2000, eps=1e-8)
    assert sa.alpha == 1.0  # no data
    sa.update([0.0, 1.0, 0.0, 1.0], [0.2, 0.4, 0.2, 0.4])  # std 0.5 and 0.1 (population)
    assert sa.alpha == pytest.approx(0.5 / (0.1 + 1e-8))
    off = ScaleAligner(enabled=False)
    off.update([0.0, 1.0, 0.0, 1.0], [0.2, 0.4, 0.2, 0.4])
    assert off.alpha == 1.0


def test_scale_aligner_window_and_degenerate():
    sa = ScaleAligner(window=3)
    sa.update([0.0, 1.0, 0.0], [0.0, 0.0, 0.0])
    assert sa.alpha == 1.0  # std(r_cost) == 0: constant cost term, no alignment
    sa.update([1.0], [0.5])  # window -> task [1, 0, 1], cost [0, 0, 0.5]
    assert sa.alpha == pytest.approx(math.sqrt(2 / 9) / (math.sqrt(1 / 18) + 1e-8))  # ~= 2
    flat = ScaleAligner()
    flat.update([1.0, 1.0, 1.0], [0.1, 0.5, 0.9])
    assert flat.alpha == 1.0  # std(r_task) == 0 would switch the cost term off
    with pytest.raises(ValueError):
        flat.update([1.0], [0.1, 0.2])


def test_budget_reward_and_shaper():
    assert budget_reward(0.5, 0.8, lam=0.3, alpha=2.0) == pytest.approx(0.5 + 0.3 * 2.0 * 0.8)
    assert budget_reward(1.0, 0.0, lam=0.9, alpha=5.0) == 1.0
    shaper = BudgetRewardShaper(lam=0.5)
    batch = shaper.shape([0.0, 1.0, 0.0, 1.0, 0.5], [1.0, 4.0, 9.0, 16.0, 25.0])
    # the batch enters the window first: r_cost as in the hand-computed window above
    assert batch.r_cost == pytest.approx([1.0, 1 - 0.8 / 3.6, 0.5, 1 - 2.8 / 3.6, 0.0])
    expected_alpha = np.std(batch.r_task) / (np.std(batch.r_cost) + 1e-8)
    assert batch.alpha == pytest.approx(expected_alpha)
    assert batch.rewards == pytest.approx([t + 0.5 * expected_alpha * c for t, c in zip(batch.r_task, batch.r_cost)])
    no_align = BudgetRewardShaper(lam=0.5, align=False).shape([0.0, 1.0], [1.0, 4.0])
    assert no_align.alpha == 1.0


# --------------------------------------------------------------------------- PPO losses


def _fixed_batch():
    return {
        "new_logp": torch.tensor([-1.0, -0.5, -2.0], requires_grad=True),
        "old_logp": torch.tensor([-1.2, -0.5, -1.0]),
        "advantages": torch.tensor([1.0, -2.0, 0.5]),
        "new_values": torch.tensor([0.5, 1.0, -0.3], requires_grad=True),
        "old_values": torch.tensor([0.0, 0.9, 0.0]),
        "returns": torch.tensor([1.0, 0.0, 0.0]),
        "entropy": torch.tensor([1.0, 0.5, 0.9]),
    }


def test_ppo_losses_hand_computed():
    b = _fixed_batch()
    out = {k: v if k == "total" else v.detach() for k, v in ppo_losses(**b).items()}
    ratio = [math.exp(0.2), 1.0, math.exp(-1.0)]
    assert out["ratio"].tolist() == pytest.approx(ratio, rel=1e-6)
    # min(r*A, clip(r, 0.8, 1.2)*A): ep0 clipped at 1.2*1; ep1 -2; ep2 unclipped e^-1 * 0.5 (< 0.8*0.5)
    policy = -(1.2 * 1.0 + (-2.0) + math.exp(-1.0) * 0.5) / 3
    assert float(out["policy_loss"]) == pytest.approx(policy, rel=1e-6)
    # value clipping: ep0 max(0.25, (0.2-1)^2=0.64); ep1 max(1, 1); ep2 max(0.09, (-0.2)^2=0.04)
    value = (0.64 + 1.0 + 0.09) / 3
    assert float(out["value_loss"]) == pytest.approx(value, rel=1e-6)
    assert float(out["entropy_loss"]) == pytest.approx(-0.8)
    assert out["total"].item() == pytest.approx(policy + 0.5 * value - 0.01 * 0.8, rel=1e-6)
    assert float(out["clip_frac"]) == pytest.approx(2 / 3)

    out["total"].backward()
    g = b["new_logp"].grad.tolist()
    assert g[0] == 0.0  # clipped: no policy gradient
    assert g[1] == pytest.approx(2.0 / 3)  # -A * ratio / B
    assert g[2] == pytest.approx(-0.5 * math.exp(-1.0) / 3)
    gv = b["new_values"].grad.tolist()
    assert gv[0] == 0.0  # the clipped value error is the larger one: no gradient to V
    assert gv[1] == pytest.approx(0.5 * 2 * (1.0 - 0.0) / 3)
    assert gv[2] == pytest.approx(0.5 * 2 * (-0.3) / 3)


def test_higher_entropy_lowers_total():
    b = _fixed_batch()
    low = ppo_losses(**{**b, "entropy": torch.zeros(3)})["total"]
    high = ppo_losses(**{**b, "entropy": torch.ones(3)})["total"]
    assert high.item() == pytest.approx(low.item() - 0.01)


def test_compute_advantages():
    adv, ret = compute_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5]), normalize=False)
    assert adv.tolist() == [0.5, -0.5] and ret.tolist() == [1.0, 0.0]
    adv, _ = compute_advantages(torch.tensor([3.0, 1.0, 2.0]), torch.tensor([0.0, 0.0, 0.0]))
    assert adv.tolist() == pytest.approx([1.2247449, -1.2247449, 0.0], rel=1e-5)  # (x-2)/sqrt(2/3)
    adv, _ = compute_advantages(torch.tensor([1.0]), torch.tensor([0.25]))
    assert adv.tolist() == [0.75]  # a single episode is not normalised


# --------------------------------------------------------------------------- router


def _router(emb_dim=16, hidden=32, seed=0, **kw):
    torch.manual_seed(seed)
    return TierRouter(emb_dim=emb_dim, hidden=hidden, **kw)


def test_router_forward_shapes_and_decide():
    r = _router()
    q, x = torch.randn(16), torch.randn(16)
    logits, value = r(q, x, 0)
    assert logits.shape == (3,) and value.shape == ()
    logits_b, values_b = r(torch.randn(7, 16), torch.randn(7, 16), torch.arange(7) % 5)
    assert logits_b.shape == (7, 3) and values_b.shape == (7,)
    logits_s, _ = r(torch.randn(4, 16), torch.randn(4, 16), "summary")
    assert logits_s.shape == (4, 3)

    with torch.no_grad():
        r.policy_head[-1].bias.copy_(torch.tensor([0.0, 0.0, 3.0]))  # make "high" the argmax
        logits, value = r(q, x, MODULES.index("temporal"))
    tier, logp, v = r.decide(q.numpy(), x.numpy(), "temporal", greedy=True)
    assert tier == TIERS[int(logits.argmax())] == "high"
    assert logp == pytest.approx(float(torch.log_softmax(logits, -1)[2]), abs=1e-6)
    assert v == pytest.approx(float(value), abs=1e-6)
    many = r.decide_many(q, x, ["entity", "temporal", "topic"], greedy=True)
    assert [t for t, _, _ in many] == ["high"] * 3 and many[1][1] == pytest.approx(logp, abs=1e-6)

    def draws(seed):
        g = torch.Generator().manual_seed(seed)
        return [r.decide(q, x, "filter", greedy=False, generator=g)[0] for _ in range(20)]

    assert draws(7) == draws(7)  # sampling is reproducible through the generator
    assert len(set(draws(7))) > 1  # and does sample (near-uniform policy at init)
    with pytest.raises(ValueError, match="unknown module"):
        r.decide(q, x, "planner", greedy=True)
    with pytest.raises(ValueError, match="embedding size"):
        r(torch.randn(8), torch.randn(8), 0)


def test_router_from_embedder_uses_description_embeddings():
    def encode(texts):  # stands in for MiniLMEmbedder.encode: (n, E) rows
        return np.stack([np.full(12, float(len(t)), dtype=np.float32) for t in texts])

    r = TierRouter.from_embedder(encode, hidden=16)
    assert r.emb_dim == 12 and r.module_names == MODULES
    assert torch.equal(r.module_emb.detach()[0], torch.full((12,), float(len(r.descriptions["filter"]))))
    with pytest.raises(ValueError, match="shape"):
        TierRouter(torch.zeros(4, 12), emb_dim=12)


def test_checkpoint_round_trip_and_mismatch(tmp_path):
    r = _router(seed=3)
    path = tmp_path / "router.pt"
    r.save(path)
    loaded = TierRouter.load(path, expected_modules=MODULES, expected_emb_dim=16)
    q, x = torch.randn(5, 16), torch.randn(5, 16)
    idx = torch.arange(5)
    with torch.no_grad():
        for a, b in zip(r(q, x, idx), loaded(q, x, idx)):
            assert torch.equal(a, b)
    assert loaded.descriptions == r.descriptions

    with pytest.raises(RouterCheckpointError, match="embedder gives 384-d"):
        TierRouter.load(path, expected_emb_dim=384)
    with pytest.raises(RouterCheckpointError, match="trained for modules"):
        TierRouter.load(path, expected_modules=("filter", "summary"), expected_emb_dim=16)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(RouterCheckpointError, match="not a readable"):
        TierRouter.load(bad)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(RouterCheckpointError, match="not a memfrontier"):
        TierRouter.load(other)
    broken = tmp_path / "broken.pt"
    payload = torch.load(path, weights_only=True)
    payload["state_dict"].pop("trunk.weight")
    torch.save(payload, broken)
    with pytest.raises(RouterCheckpointError, match="do not fit"):
        TierRouter.load(broken, expected_emb_dim=16)
    with pytest.raises(FileNotFoundError):
        TierRouter.load(tmp_path / "missing.pt")


# --------------------------------------------------------------------------- PPO learning


def _rollout(trainer, rng, n_questions, emb_dim):
    """Pipeline-ordered decisions; reward = share of decisions that picked "low"."""
    episodes = []
    for _ in range(n_questions):
        q = rng.standard_normal(emb_dim).astype(np.float32)
        s0, s1, s2 = (rng.standard_normal(emb_dim).astype(np.float32) for _ in range(3))
        d0, v0 = trainer.sample(q, s0, ["filter"])
        d1, _ = trainer.sample(q, s1, ["entity", "temporal", "topic"])
        d2, _ = trainer.sample(q, s2, ["summary"])
        decisions = d0 + d1 + d2
        reward = sum(d.tier_idx == 0 for d in decisions) / len(decisions)
        episodes.append(Episode(decisions=decisions, old_value=v0[0], reward=float(reward)))
    return episodes


def _p_low(router, q, x):
    with torch.no_grad():
        logits, _ = router(q, x, torch.arange(len(q)) % len(MODULES))
        return float(torch.softmax(logits, -1)[:, 0].mean())


def test_ppo_learns_cheap_bandit():
    emb_dim = 16
    router = _router(emb_dim=emb_dim, hidden=64, seed=1)
    trainer = PPOTrainer(router, lr=3e-3, seed=42)
    rng = np.random.default_rng(0)
    q_eval = torch.as_tensor(rng.standard_normal((50, emb_dim)), dtype=torch.float32)
    x_eval = torch.as_tensor(rng.standard_normal((50, emb_dim)), dtype=torch.float32)
    before = _p_low(router, q_eval, x_eval)
    rewards = []
    for _ in range(10):
        stats = trainer.update(_rollout(trainer, rng, 32, emb_dim))
        rewards.append(stats["mean_reward"])
        assert stats["n_steps"] == 4 and math.isfinite(stats["policy_loss"])
    after = _p_low(router, q_eval, x_eval)
    assert before == pytest.approx(1 / 3, abs=0.05)  # near-uniform start
    assert after > 0.7, (before, after)
    assert np.mean(rewards[-3:]) > np.mean(rewards[:3]) + 0.2


def test_ppo_update_splits_into_batches():
    router = _router(emb_dim=8, hidden=16)
    trainer = PPOTrainer(router, batch_questions=4, epochs=2)
    stats = trainer.update(_rollout(trainer, np.random.default_rng(1), 10, 8))
    assert stats["n_episodes"] == 10 and stats["n_steps"] == 3 * 2  # batches of 4, 4, 2
    with pytest.raises(ValueError):
        trainer.update([])
