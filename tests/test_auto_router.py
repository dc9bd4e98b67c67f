"""``auto``, the router across strategy configurations: the decision against hand-computed
values, the router file (predictions, version refusal), the strategy on a real store with MiniLM,
training on a scripted frontier folder (and the test-split refusal), the frontier's regret column,
and one end-to-end run with the embedded model."""

from __future__ import annotations

import asyncio
import json

import pytest
from router_files import config, target, write_router
from typer.testing import CliRunner

from memfrontier.cli import app
from memfrontier.core.ledger import BudgetExceededError
from memfrontier.core.types import Budget, Context, Preference, Record, Scope
from memfrontier.frontier.report import build_report, render_markdown
from memfrontier.strategies import MemoryEnv, Query, effective_budget, get_strategy
from memfrontier.strategies.auto import Auto, AutoConfig, Router, RouterFileError
from memfrontier.strategies.auto.decision import Prediction, Scales, decide, utility
from memfrontier.strategies.auto.features import SCALAR_FEATURES, ScopeStats, feature_vector, question_features
from memfrontier.train.configs import StrategyRouterConfig
from memfrontier.train.strategy_router import TestSplitError, train_strategy_router

run = CliRunner().invoke
PERF, BALANCED, COST = (Preference.preset(p) for p in ("perf", "balanced", "cost"))
SCALES = Scales(f1=1.0, usd=1e-4, proxy_s=1.0)


def pred(label, f1, usd, proxy_s=0.2, tokens=100.0, usd_high=None, proxy_s_high=None, tokens_high=None):
    return Prediction(
        label,
        f1,
        usd,
        proxy_s,
        tokens,
        usd if usd_high is None else usd_high,
        proxy_s if proxy_s_high is None else proxy_s_high,
        tokens if tokens_high is None else tokens_high,
    )


# A: best and dearest; B: the middle; C: cheap and weak (USD in units of the scale 1e-4)
A = pred("A", 0.9, 1.0e-4, usd_high=1.2e-4)
B = pred("B", 0.7, 0.5e-4, usd_high=0.8e-4)
C = pred("C", 0.4, 0.1e-4, usd_high=0.65e-4)


# --- the decision -------------------------------------------------------------------------------
def test_each_preset_picks_the_argmax_of_its_utility_by_hand():
    # U = lQ F1/1 - lC USD/1e-4 - lL s/1; every proxy_s is 0.2
    # perf (1, 0, 0): A 0.9, B 0.7, C 0.4
    d = decide([A, B, C], PERF, None, SCALES)
    assert (d.label, d.rule) == ("A", "argmax")
    assert d.utilities == pytest.approx({"A": 0.9, "B": 0.7, "C": 0.4})
    # balanced (1, 0.5, 0.5): A 0.9-0.5-0.1 = 0.30, B 0.7-0.25-0.1 = 0.35, C 0.4-0.05-0.1 = 0.25
    d = decide([A, B, C], BALANCED, None, SCALES)
    assert d.label == "B" and d.utilities == pytest.approx({"A": 0.30, "B": 0.35, "C": 0.25})
    # cost (1, 1, 0.25): A 0.9-1-0.05 = -0.15, B 0.7-0.5-0.05 = 0.15, C 0.4-0.1-0.05 = 0.25
    d = decide([A, B, C], COST, None, SCALES)
    assert d.label == "C" and d.utilities == pytest.approx({"A": -0.15, "B": 0.15, "C": 0.25})
    # the scales divide each objective: s_F1 = 0.5 doubles quality against cost -> balanced picks A
    # (A 1.8-0.5-0.1 = 1.2, B 1.4-0.25-0.1 = 1.05, C 0.8-0.05-0.1 = 0.65)
    assert decide([A, B, C], BALANCED, None, Scales(0.5, 1e-4, 1.0)).label == "A"
    assert utility(0.9, 1e-4, 0.2, BALANCED, SCALES) == pytest.approx(0.30)


def test_budget_filter_uses_upper_bounds_then_the_cheapest_that_fits_then_an_error():
    # upper bounds: A 1.2e-4, B 0.8e-4, C 0.65e-4 USD
    d = decide([A, B, C], PERF, Budget(max_usd=0.9e-4), SCALES)  # B and C fit: perf's best of them
    assert (d.label, d.rule) == ("B", "argmax") and d.fits == {"A": False, "B": True, "C": True}
    # no upper bound fits 0.6e-4; the point predictions of B (0.5e-4) and C (0.1e-4) do: the cheapest, C
    d = decide([A, B, C], PERF, Budget(max_usd=0.6e-4), SCALES)
    assert (d.label, d.rule) == ("C", "cheapest_fitting") and not any(d.fits.values())
    with pytest.raises(BudgetExceededError, match=r"max_usd=5e-06.*the cheapest, C, is predicted at 1e-05 USD"):
        decide([A, B, C], PERF, Budget(max_usd=0.05e-4), SCALES)
    # seconds and tokens are capped the same way
    slow = pred("slow", 0.9, 0.0, proxy_s=5.0, tokens=900, proxy_s_high=6.0)
    quick = pred("quick", 0.5, 0.0, proxy_s=1.0, tokens=100, proxy_s_high=1.5)
    assert decide([slow, quick], PERF, Budget(max_proxy_s=2.0), SCALES).label == "quick"
    assert decide([slow, quick], PERF, Budget(max_tokens=500), SCALES).label == "quick"
    assert decide([slow, quick], PERF, Budget(max_proxy_s=10.0, max_tokens=1000), SCALES).label == "slow"


def test_ties_go_to_the_cheaper_configuration_and_bad_input_is_refused():
    a, b = pred("a", 0.5, 2e-5), pred("b", 0.5, 1e-5)
    assert decide([a, b], PERF, None, SCALES).label == "b"
    with pytest.raises(ValueError, match="no configuration"):
        decide([], PERF, None, SCALES)
    with pytest.raises(ValueError, match="duplicate"):
        decide([a, a], PERF, None, SCALES)
    with pytest.raises(ValueError, match="scale usd must be > 0"):
        Scales(1.0, 0.0, 1.0)


# --- features and the router file ---------------------------------------------------------------
def test_question_features_and_vector_layout():
    # log(1 + 5 words), temporal ("when"), no multi-hop cue, no inference cue
    assert question_features("When did Mia move away?") == pytest.approx([1.791759, 1.0, 0.0, 0.0], abs=1e-6)
    assert question_features("What books has Mia read?")[1:] == [0.0, 1.0, 0.0]
    assert question_features("Would Mia likely enjoy jazz?")[1:] == [0.0, 0.0, 1.0]
    import numpy as np

    x = feature_vector(np.ones(4, dtype=np.float32), "When?", ScopeStats(records=9, sessions=2), 0.5)
    assert x.shape == (4 + len(SCALAR_FEATURES),) and x.dtype == np.float64
    assert x[4:].tolist() == pytest.approx([np.log(2), 1.0, 0.0, 0.0, np.log(10), np.log(3), 0.5])
    with pytest.raises(ValueError, match="views_built"):
        feature_vector(np.ones(4), "q", ScopeStats(1, 1), 1.5)


def test_router_predictions_from_the_file_by_hand(tmp_path):
    import numpy as np

    from memfrontier.strategies.auto.router import Calibration, TargetModel

    f1 = target(0.2, temporal_cue=0.6)
    calibrated = TargetModel(coef=f1.coef, intercept=0.2, calibration=Calibration(x=[0.0, 1.0], y=[0.1, 0.5]))
    path = write_router(
        tmp_path / "r.json",
        config("k1", "rag", {"k": 1}, f1=f1, usd=target(1e-5, margin=2e-6), proxy_s=target(0.5), tokens=target(-50.0)),
        config("k4", "rag", {"k": 4}, f1=calibrated, usd=target(4e-5)),
    )
    router = Router.load(path)
    x = np.zeros(router.dim)
    x[384 + SCALAR_FEATURES.index("temporal_cue")] = 1.0
    k1, k4 = router.predict(x)
    assert (k1.label, k1.f1, k1.usd, k1.usd_high, k1.proxy_s) == (
        "k1",
        pytest.approx(0.8),
        1e-5,
        pytest.approx(1.2e-5),
        0.5,
    )
    assert k1.tokens == 0.0  # a resource is never predicted below 0
    assert k4.f1 == pytest.approx(0.1 + 0.4 * 0.8)  # raw 0.8 through the calibration (0,0.1)-(1,0.5)
    assert len(router.sha256) == 64


def test_router_file_of_another_version_or_format_is_refused(tmp_path):
    path = write_router(tmp_path / "r.json", config("a", "rag"), config("b", "rag", {"k": 2}))
    raw = json.loads(path.read_text())
    raw["version"] = 2
    (tmp_path / "v2.json").write_text(json.dumps(raw))
    with pytest.raises(RouterFileError, match="router file version 2, this code reads version 1; retrain"):
        Router.load(tmp_path / "v2.json")
    raw.update(version=1, format="something-else")
    (tmp_path / "other.json").write_text(json.dumps(raw))
    with pytest.raises(RouterFileError, match="not a memfrontier strategy-router file"):
        Router.load(tmp_path / "other.json")
    raw.update(format="memfrontier.strategy-router", features={**raw["features"], "version": 0})
    (tmp_path / "f0.json").write_text(json.dumps(raw))
    with pytest.raises(RouterFileError, match="feature version 0"):
        Router.load(tmp_path / "f0.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RouterFileError, match="not a readable router file"):
        Router.load(tmp_path / "bad.json")
    with pytest.raises(FileNotFoundError, match="train strategy-router"):
        Router.load(tmp_path / "none.json")
    # the CLI refuses it before any work
    res = run(
        app, ["eval", "--strategy", "auto", "--set", f"router={tmp_path / 'v2.json'}", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and "version 2" in res.output


# --- the strategy on a real store -----------------------------------------------------------------
EVAN = Scope(user_id="evan")


def evan_store(path, minilm):
    from memfrontier.store.sqlite import SQLiteStore

    store = SQLiteStore(path, minilm)
    texts = [
        "I bought a Prius.",
        "It is blue.",
        "We went hiking.",
        "The trail was steep.",
        "I adopted a cat.",
        "She is called Miso.",
        "I started a new job.",
        "It is at a bakery.",
        "We visited Lisbon.",
        "The food was great.",
        "I read a novel.",
        "It was about whales.",
    ]
    store.add(
        [
            Record(
                id=f"evan:D{i // 2 + 1}:{i % 2}",
                scope=EVAN,
                session_id=f"D{i // 2 + 1}",
                speaker="Evan",
                timestamp=f"2023-05-{i // 2 + 1:02d}T10:00:00",
                text=t,
            )
            for i, t in enumerate(texts)
        ]
    )
    return store


def k1_k4_router(path, margin=0.0):
    """k1 is predicted better on temporal questions (F1 0.8 vs 0.5), worse elsewhere (0.2); k4 costs 4x."""
    return write_router(
        path,
        config("rag-k1", "rag", {"k": 1}, f1=target(0.2, temporal_cue=0.6), usd=target(1e-5, margin)),
        config("rag-k4", "rag", {"k": 4}, f1=target(0.5), usd=target(4e-5, margin)),
    )


def test_auto_routes_by_question_kind_delegates_and_records_the_decision(tmp_path, minilm):
    store = evan_store(tmp_path / "store", minilm)
    env = MemoryEnv(store=store, llm=None, answer_llm=None)
    auto = get_strategy("auto", router=str(k1_k4_router(tmp_path / "r.json")))
    assert set(auto.members) == {"rag-k1", "rag-k4"} and auto.members["rag-k4"].config.k == 4
    assert auto.recipes == auto.members["rag-k1"].recipes and auto.is_built(env, EVAN)

    def ask(text, budget=Budget(), preference=PERF):
        return asyncio.run(auto.context(Query(text=text, scope=EVAN), env, preference, budget))

    ctx = ask("When did Evan buy the car?")
    m = ctx.meta["auto"]
    assert (m["configuration"], m["strategy"], m["rule"]) == ("rag-k1", "rag", "argmax")
    assert m["predictions"]["rag-k1"]["f1"] == pytest.approx(0.8) and m["predictions"]["rag-k4"]["usd"] == 4e-5
    assert m["preference"] == PERF.model_dump() and m["scales"] == {"f1": 1.0, "usd": 1e-4, "proxy_s": 1.0}
    assert m["router_sha256"] == auto.router.sha256 and m["route_ms"] > 0 and m["unbuilt"] == []
    assert ctx.meta["route"] == {"configuration": "rag-k1"} and len(ctx.meta["chunks"]) == 1  # rag's own meta kept
    ctx = ask("What colour is Evan's car?")
    assert ctx.meta["auto"]["configuration"] == "rag-k4" and len(ctx.meta["chunks"]) == 4
    # a budget of 2e-5 USD leaves k1 only; 5e-6 fits nothing
    assert ask("What colour is Evan's car?", Budget(max_usd=2e-5)).meta["auto"]["configuration"] == "rag-k1"
    with pytest.raises(BudgetExceededError, match="rag-k1, is predicted at 1e-05 USD"):
        ask("What colour is Evan's car?", Budget(max_usd=5e-6))
    # the strategy's own preference wins over the caller's: cost (1, 1, 0.25) on the temporal question:
    # k1 0.8 - 0.1 = 0.7 > k4 0.5 - 0.4 = 0.1; its own budget, combined with the caller's by the facade
    # (effective_budget), is the one it routes under
    own = get_strategy("auto", router=str(tmp_path / "r.json"), preference="cost", budget={"max_usd": 2e-5})
    limit = effective_budget(own.config, Budget())
    ctx = asyncio.run(own.context(Query(text="What colour is Evan's car?", scope=EVAN), env, PERF, limit))
    assert ctx.meta["auto"]["configuration"] == "rag-k1" and ctx.meta["auto"]["budget"]["max_usd"] == 2e-5
    assert ctx.meta["auto"]["preference"] == COST.model_dump() and ctx.meta["auto"]["preference_source"] == "config"
    store.close()


class _Recorder:
    """A configuration that records the preference and budget it is asked under."""

    name, prompt_version, recipes = "rag", "x", ()

    def __init__(self):
        self.asked: list = []

    def is_built(self, env, scope):
        return True

    async def context(self, query, env, preference, budget):
        self.asked.append((preference, budget))
        return Context(text="", meta={})


def test_the_chosen_member_runs_under_the_preference_auto_decided_under(tmp_path, minilm):
    store = evan_store(tmp_path / "store", minilm)
    env = MemoryEnv(store=store, llm=None, answer_llm=None)
    path = k1_k4_router(tmp_path / "r.json")
    q = Query(text="When did Evan buy the car?", scope=EVAN)
    for configured, caller, decided, source in (
        (None, None, PERF, "default"),
        (None, COST, COST, "caller"),
        ("cost", PERF, COST, "config"),
        ("cost", None, COST, "config"),
    ):
        k1, k4 = _Recorder(), _Recorder()
        auto = Auto(
            AutoConfig(router=path, preference=configured, budget=Budget(max_usd=2e-5)),
            members={"rag-k1": k1, "rag-k4": k4},
        )
        ctx = asyncio.run(auto.context(q, env, caller, effective_budget(auto.config, Budget(max_tokens=500))))
        assert (
            ctx.meta["auto"]["preference"] == decided.model_dump() and ctx.meta["auto"]["preference_source"] == source
        )
        # the member is handed the decided preference and the question's effective budget (the caller's
        # made stricter by auto's own, as the facade hands it)
        assert k1.asked == [(decided, Budget(max_usd=2e-5, max_tokens=500))] and k4.asked == []
    store.close()


class _Unbuilt:
    """A configuration whose offline view is not built for any scope (until ``built`` is set)."""

    name, prompt_version, recipes = "memorycpt", "x", ()

    def __init__(self):
        self.built, self.asked = False, 0

    def is_built(self, env, scope):
        self.asked += 1
        return self.built


def test_auto_leaves_out_configurations_whose_view_is_not_built(tmp_path, minilm):
    store = evan_store(tmp_path / "store", minilm)
    env = MemoryEnv(store=store, llm=None, answer_llm=None)
    path = write_router(
        tmp_path / "r.json", config("rag", "rag", f1=target(0.3)), config("cpt", "memorycpt", f1=target(0.9))
    )
    cpt = _Unbuilt()
    auto = Auto(AutoConfig(router=path), members={"cpt": cpt})
    assert not auto.is_built(env, EVAN)
    ctx = asyncio.run(auto.context(Query(text="What colour is the car?", scope=EVAN), env, PERF, Budget()))
    assert ctx.meta["auto"]["configuration"] == "rag" and ctx.meta["auto"]["unbuilt"] == ["cpt"]
    assert set(ctx.meta["auto"]["predictions"]) == {"rag"}
    # a view built later (no record is written) is found at the next question; once built, the
    # scope's state is kept until its records change
    cpt.built = True
    query = Query(text="What colour is the car?", scope=EVAN)
    decision, _, unbuilt = auto.route(query, env, PERF, Budget())
    assert (decision.label, unbuilt) == ("cpt", [])
    asked = cpt.asked
    assert auto.route(query, env, PERF, Budget())[0].label == "cpt" and cpt.asked == asked
    store.add([Record(id="new", scope=EVAN, session_id="s9", speaker="Evan", text="I sold the car.")])
    auto.route(query, env, PERF, Budget())
    assert cpt.asked == asked + 1
    # a second store whose scope has the same key and write counter is its own scope
    other = evan_store(tmp_path / "other", minilm)
    other.add([Record(id=f"o{i}", scope=EVAN, session_id="s8", speaker="Evan", text=f"Note {i}.") for i in (1, 2)])
    other_env = MemoryEnv(store=other, llm=None, answer_llm=None)
    assert other.scope_generation(EVAN) == store.scope_generation(EVAN)
    assert auto._scope(env, EVAN)[0] == ScopeStats(records=13, sessions=7)
    assert auto._scope(other_env, EVAN)[0] == ScopeStats(records=14, sessions=7)
    other.close()
    with pytest.raises(ValueError, match="not configurations of the router"):
        Auto(AutoConfig(router=path), members={"nope": _Unbuilt()})
    from memfrontier.strategies import StrategyConfigError

    with pytest.raises(StrategyConfigError, match="router: no router file"):
        get_strategy("auto", router=str(tmp_path / "none.json"))
    store.close()


# --- training on a scripted frontier ----------------------------------------------------------------
NAMES = ["Mia", "Leo", "Ana", "Sam", "Kai", "Zoe"]
EVENTS = ["move to Paris", "start the new job", "adopt the dog", "visit her grandmother"]
LIKES = ["food", "music", "sport", "colour"]


def scripted_frontier(root, minilm, *, conversations=("conv-1", "conv-2", "conv-3"), split="train"):
    """A frontier folder whose records say: memorycpt wins temporal questions (F1 0.9 vs 0.1), rag-k4
    the others (0.9 vs 0.1); memorycpt costs 3x (3e-4 USD, 2 s, 3000 tokens vs 1e-4, 1 s, 1000)."""
    from memfrontier.store.sqlite import SQLiteStore

    store = SQLiteStore(root / "store", minilm)
    for c in conversations:
        store.add(
            [
                Record(
                    id=f"{c}:D{s}:{i}",
                    scope=Scope(user_id=c),
                    session_id=f"{c}:session_{s}",
                    speaker="Mia",
                    timestamp=f"2023-0{s}-01T10:00:00",
                    text=f"Turn {i} of session {s}.",
                )
                for s in (1, 2)
                for i in range(3)
            ]
        )
    store.close()
    questions = []
    for n, name in enumerate(NAMES):
        for e in EVENTS:
            questions.append((f"When did {name} {e}?", "2", True))
        for like in LIKES:
            questions.append((f"What {like} does {name} enjoy the most?", "4", False))
    configs = {
        "rag-k4": ("rag", {"k": 4}, 1e-4, 1.0, 1000),
        "memorycpt": ("memorycpt", {}, 3e-4, 2.0, 3000),
        "oracle": ("oracle", {}, 1e-4, 1.0, 500),
    }
    for label, (strategy, options, usd, secs, tokens) in configs.items():
        d = root / "configs" / label
        d.mkdir(parents=True)
        rows = []
        for i, (text, cat, temporal) in enumerate(questions):
            good = temporal == (strategy == "memorycpt") or strategy == "oracle"
            rows.append(
                {
                    "id": f"q{i}",
                    "conversation_id": conversations[i % len(conversations)],
                    "category": cat,
                    "question": text,
                    "gold": "x",
                    "f1": (0.9 if good else 0.1) - 0.02 * (i % 3),
                    "usd": usd,
                    "proxy_s": secs,
                    "unpriced_calls": 0,
                    "usage": {"by_stage": {"query": {"input_tokens": tokens - 10, "output_tokens": 10}}},
                }
            )
        (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (d / "summary.json").write_text(
            json.dumps(
                {
                    "config": {
                        "dataset": "locomo",
                        "split": split,
                        "strategy": strategy,
                        "strategy_options": options,
                        "store": str(root / "store"),
                    },
                    "questions": len(rows),
                    "fallbacks": {"exceeded": []},
                    "provenance": {"answer_model": "m"},
                }
            )
        )
    return root


def test_training_learns_which_configuration_wins_which_kind_of_question(tmp_path, minilm):
    frontier = scripted_frontier(tmp_path / "frontier", minilm)
    out = tmp_path / "router.json"
    res = run(app, ["train", "strategy-router", "--from", str(frontier), "--out", str(out), "--val-share", "0.25"])
    assert res.exit_code == 0, res.output
    router = Router.load(out)
    assert router.labels == ["memorycpt", "rag-k4"]  # the oracle anchor is left out, with the reason
    rep = json.loads(out.with_suffix(".validation.json").read_text())
    assert any("oracle: left out" in n for n in rep["notes"]) and any("fewer than the 150" in n for n in rep["notes"])
    assert rep["questions"] == 12 and router.file.provenance["questions"]["train"] == 36
    # held-out categories are balanced: 6 temporal (2) and 6 others (4)
    assert sorted(int(i[1:]) % 8 < 4 for i in rep["question_ids"]).count(True) == 6
    assert rep["per_configuration"]["memorycpt"]["mae_f1"] < 0.15 and rep["presets"]["perf"]["regret"] < 0.15
    assert rep["per_configuration"]["rag-k4"]["mae_usd"] < 1e-6  # a constant cost is learnt exactly
    assert "| perf |" in out.with_suffix(".validation.md").read_text()
    # scales: std over the training records (F1 ~0.4 across both kinds; USD 1e-4 / 3e-4 halves)
    assert router.scales.usd == pytest.approx(1.0e-4, rel=0.05) and 0.35 < router.scales.f1 < 0.45

    from memfrontier.store.sqlite import SQLiteStore

    store_env = MemoryEnv(store=SQLiteStore(frontier / "store", minilm), llm=None, answer_llm=None)
    auto = Auto(AutoConfig(router=out), router=router, members={"memorycpt": _Built(), "rag-k4": _Built()})

    def choose(text, preference):
        q = Query(text=text, scope=Scope(user_id="conv-1"))
        return auto.route(q, store_env, preference, Budget())[0].label

    # new names and events: the feature-identifiable kind decides
    assert choose("When did Noah sell his old car?", PERF) == "memorycpt"
    assert choose("What book does Noah enjoy the most?", PERF) == "rag-k4"
    # under cost (1, 1, 0.25) the 3x price outweighs memorycpt's F1 gain even on the temporal question
    assert choose("When did Noah sell his old car?", COST) == "rag-k4"
    store_env.store.close()


def test_training_reads_the_store_and_never_creates_one(tmp_path, minilm):
    """``--store`` naming a folder with no store in it is refused, and nothing is written there (it
    was opened as a new, empty store: a store.db left behind, then "holds no record")."""
    frontier = scripted_frontier(tmp_path / "frontier", minilm)
    empty = tmp_path / "empty"
    empty.mkdir()
    args = ["train", "strategy-router", "--from", str(frontier), "--out", str(tmp_path / "r.json")]
    res = run(app, [*args, "--store", str(empty)])
    assert res.exit_code == 2 and f"the frontier's store {empty} is missing" in " ".join(res.output.split())
    assert list(empty.iterdir()) == [] and not (tmp_path / "r.json").exists()


class _Built:
    name, prompt_version, recipes = "stub", "x", ()

    def is_built(self, env, scope):
        return True


def test_training_refuses_the_test_split(tmp_path, minilm):
    with pytest.raises(TestSplitError, match="conv-49.*never trained on the test split"):
        train_strategy_router(
            StrategyRouterConfig(
                frontier_dir=scripted_frontier(tmp_path / "a", minilm, conversations=("conv-1", "conv-49")),
                out=tmp_path / "r.json",
            ),
            embedder=minilm,
        )
    with pytest.raises(TestSplitError, match="split 'test'"):
        train_strategy_router(
            StrategyRouterConfig(
                frontier_dir=scripted_frontier(tmp_path / "b", minilm, split="test"), out=tmp_path / "r.json"
            ),
            embedder=minilm,
        )
    res = run(app, ["train", "strategy-router", "--from", str(tmp_path / "b"), "--out", str(tmp_path / "r.json")])
    assert res.exit_code == 2 and "never trained on the test split" in res.output
    with pytest.raises(ValueError, match="oracle cannot train a router: oracle reads the gold evidence"):
        train_strategy_router(
            StrategyRouterConfig(
                frontier_dir=scripted_frontier(tmp_path / "c", minilm),
                out=tmp_path / "r.json",
                only=["oracle", "rag-k4"],
            ),
            embedder=minilm,
        )
    assert not (tmp_path / "r.json").exists()


# --- the frontier report: regret against the per-question oracle choice ----------------------------------
def _run_dir(path, strategy, rows):
    path.mkdir(parents=True)
    path.joinpath("predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path.joinpath("summary.json").write_text(
        json.dumps(
            {
                "config": {"dataset": "locomo", "strategy": strategy},
                "questions": len(rows),
                "construction": {},
                "provenance": {"answer_model": "m"},
            }
        )
    )
    return path


def test_frontier_reports_the_routers_regret_against_the_per_question_oracle(tmp_path):
    # two questions; a is better on q0, b on q1; the router picked a both times (its rows copy a's)
    def rows(f1s, usd, meta=None):
        return [
            {
                "id": f"q{i}",
                "category": "1",
                "f1": f,
                "usd": usd,
                "proxy_s": 1.0,
                "evidence_recall": 1.0,
                "usage": {"by_stage": {"query": {}}},
                **({"strategy_meta": meta} if meta else {}),
            }
            for i, f in enumerate(f1s)
        ]

    meta = {
        "auto": {
            "predictions": {"a": {}, "b": {}},
            "unbuilt": [],
            "preference": BALANCED.model_dump(),
            "scales": {"f1": 0.5, "usd": 1e-4, "proxy_s": 1.0},
        },
        "route": {"configuration": "a"},
    }
    runs = [
        {"label": "a", "strategy": "rag", "dir": _run_dir(tmp_path / "a", "rag", rows([0.8, 0.2], 1e-4))},
        {"label": "b", "strategy": "memorycpt", "dir": _run_dir(tmp_path / "b", "memorycpt", rows([0.4, 0.6], 2e-4))},
        {"label": "auto", "strategy": "auto", "dir": _run_dir(tmp_path / "auto", "auto", rows([0.8, 0.2], 1e-4, meta))},
    ]
    rep = build_report(runs, reference="a")
    auto = next(r for r in rep["rows"] if r["label"] == "auto")
    # balanced U = F1/0.5 - 0.5 USD/1e-4 - 0.5 * 1 s: a (1.6-0.5-0.5, 0.4-0.5-0.5) = (0.6, -0.6),
    # b (0.8-1-0.5, 1.2-1-0.5) = (-0.7, -0.3); the oracle picks a then b: regret (0 + 0.3) / 2
    assert auto["regret_utility"] == pytest.approx(0.15) and auto["regret_configurations"] == ["a", "b"]
    assert auto["regret_f1"] == pytest.approx((0.0 + 0.4) / 2) and auto["oracle_f1"] == pytest.approx(0.7)
    assert auto["oracle_choice_f1"] == pytest.approx(0.7)
    md = render_markdown(rep)
    assert "| 0.150 / 0.200 (oracle F1 0.700) |" in md and "Regret of a router (auto)" in md
    # without b's rows there is no oracle to compare with: said so
    rep = build_report([runs[0], runs[2]], reference="a")
    assert rep["rows"][1]["regret_status"] == "no rows of b on these questions"


def test_frontier_places_the_router_against_the_fixed_frontier(tmp_path):
    # a: F1 (0.8, 0.2) at 1 USD×1e4/q, b: (0.4, 1.0) at 2; the router answers q0 as a and q1 as b
    def rows(f1s, usds, meta=None):
        return [
            {
                "id": f"q{i}",
                "category": "1",
                "f1": f,
                "usd": u,
                "proxy_s": 1.0,
                "evidence_recall": 1.0,
                "usage": {"by_stage": {"query": {}}},
                **({"strategy_meta": meta} if meta else {}),
            }
            for i, (f, u) in enumerate(zip(f1s, usds))
        ]

    def placed(name, f1s, usds):
        routed = {"label": "auto", "strategy": "auto", "dir": _run_dir(tmp_path / name, "auto", rows(f1s, usds))}
        rep = build_report([*fixed, routed], reference="a")
        return next(r for r in rep["rows"] if r["label"] == "auto"), render_markdown(rep)

    fixed = [
        {"label": "a", "strategy": "rag", "dir": _run_dir(tmp_path / "a", "rag", rows([0.8, 0.2], [1e-4, 1e-4]))},
        {
            "label": "b",
            "strategy": "memorycpt",
            "dir": _run_dir(tmp_path / "b", "memorycpt", rows([0.4, 1.0], [2e-4, 2e-4])),
        },
    ]
    auto, md = placed("auto", [0.8, 1.0], [1e-4, 2e-4])
    # at 1.5 USD×1e4/q the fixed frontier is a (0.5 at 1.0; b costs 2.0): ΔF1 = mean(0, 0.8) = 0.4
    assert auto["usd_x1e4_amortized"] == pytest.approx(1.5) and auto["frontier_ref"] == "a"
    assert auto["frontier_ref_within"] and auto["above_frontier"]
    assert auto["d_f1_frontier"] == pytest.approx(0.4) and auto["d_f1_frontier_low"] == pytest.approx(0.0)
    # a half-and-half mix of a and b costs 1.5 too: per question 0.6, 0.6 -> ΔF1 (0.2, 0.4), mean 0.3
    assert [m[0] for m in auto["mix"]] == ["a", "b"] and [m[1] for m in auto["mix"]] == pytest.approx([0.5, 0.5])
    assert auto["mix_f1"] == pytest.approx(0.6)
    assert (auto["d_f1_mix"], auto["d_f1_mix_low"], auto["d_f1_mix_high"]) == pytest.approx((0.3, 0.2, 0.4))
    # QPC 0.9 / 1.5 = 0.6 >= a's 0.5 / 1.0 (b's is 0.35)
    assert auto["best_fixed_qpc_label"] == "a" and auto["best_fixed_qpc"] == pytest.approx(0.5)
    assert auto["qpc_at_least_best"] is True
    assert (
        "- auto (1.5000 USD×1e4/q): the fixed frontier at its cost is a; ΔF1 0.400 [0.000, 0.800], above the "
        "fixed frontier (the interval includes 0); against a random mix of fixed configurations at the same cost "
        "(0.50 a + 0.50 b, F1 0.600): ΔF1 0.300 [0.200, 0.400]; QPC 0.600 vs the best fixed 0.500 (a): "
        "not worse"
    ) in md

    # cheaper than every fixed configuration: compared with the cheapest, a (equal F1 counts as above); no mix
    auto, _ = placed("cheap", [0.8, 0.2], [0.5e-4, 0.5e-4])
    assert (auto["frontier_ref"], auto["frontier_ref_within"], auto["above_frontier"]) == ("a", False, True)
    assert auto["d_f1_frontier"] == pytest.approx(0.0) and auto["mix"] == [] and "mix_f1" not in auto
    assert auto["qpc_at_least_best"] is True
    # below the frontier at b's cost: b is its value there, and the best mix is b alone
    auto, md = placed("worse", [0.2, 0.2], [2e-4, 2e-4])
    assert auto["frontier_ref"] == "b" and not auto["above_frontier"] and auto["mix"] == [["b", 1.0]]
    assert auto["d_f1_frontier"] == pytest.approx(-0.5) and auto["d_f1_mix"] == pytest.approx(-0.5)
    assert auto["qpc_at_least_best"] is False and "not above the fixed frontier" in md and "(a): worse" in md

    # unpriced calls count as free in USD: such a router gets no verdict, such a fixed row is no point
    def unpriced(name, strategy, f1s, usds):
        d = _run_dir(
            tmp_path / name,
            strategy,
            [
                {**r, "unpriced_calls": 1, "usage": {"by_stage": {"query": {"unpriced_calls": 1}}}}
                for r in rows(f1s, usds)
            ],
        )
        return {"label": name, "strategy": strategy, "dir": d}

    rep = build_report([*fixed, unpriced("auto-unpriced", "auto", [0.8, 1.0], [1e-4, 0.0])], reference="a")
    auto = next(r for r in rep["rows"] if r["label"] == "auto-unpriced")
    assert "frontier_ref" not in auto and auto["pareto_cost"] is None
    assert "- auto-unpriced: unpriced model calls, so no place against the fixed frontier's cost" in render_markdown(
        rep
    )
    rep = build_report(
        [
            *fixed,
            unpriced("free", "rag", [0.9, 0.9], [0.0, 0.0]),
            {"label": "auto", "strategy": "auto", "dir": tmp_path / "auto"},
        ],
        reference="a",
    )
    auto = next(r for r in rep["rows"] if r["label"] == "auto")
    assert auto["frontier_ref"] == "a" and [m[0] for m in auto["mix"]] == ["a", "b"]
    assert next(r for r in rep["rows"] if r["label"] == "free")["pareto_cost"] is None


# --- end to end: frontier -> train -> eval --strategy auto (embedded model) ------------------------
@pytest.mark.slow
@pytest.mark.data
def test_frontier_train_and_eval_auto_end_to_end(tmp_path, locomo_slice):
    data = locomo_slice("conv-41", "conv-49")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: train\nconfigurations:\n  - {label: rag-k1, strategy: rag, options: {k: 1}}\n"
        "  - {label: rag-k3, strategy: rag, options: {k: 3}}\n"
    )
    frontier = tmp_path / "frontier"
    res = run(
        app,
        [
            "frontier",
            "--spec",
            str(spec),
            "--split",
            "train",
            "--limit",
            "4",
            "--out",
            str(frontier),
            "--data-root",
            str(data),
        ],
    )
    assert res.exit_code == 0, res.output
    router = tmp_path / "router.json"
    res = run(app, ["train", "strategy-router", "--from", str(frontier), "--out", str(router), "--val-share", "0.25"])
    assert res.exit_code == 0, res.output
    assert Router.load(router).labels == ["rag-k1", "rag-k3"]
    # from the frontier's export (ids and scores, no question text): the text is read from the run's
    # data, and the router is the same one
    exported = tmp_path / "exported"
    res = run(
        app, ["frontier", "--spec", str(spec), "--report-only", "--out", str(frontier), "--export", str(exported)]
    )
    assert res.exit_code == 0, res.output
    assert all("question" not in json.loads(x) for x in (exported / "configs/rag-k1/predictions.jsonl").open())
    again = tmp_path / "router-from-export.json"
    res = run(
        app,
        ["train", "strategy-router", "--from", str(exported), "--out", str(again), "--val-share", "0.25",
         "--store", str(frontier / "store")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    first, second = json.loads(router.read_text()), json.loads(again.read_text())
    assert second["configurations"] == first["configurations"] and second["scales"] == first["scales"]
    out = tmp_path / "auto"
    res = run(
        app,
        [
            "eval",
            "--strategy",
            "auto",
            "--set",
            f"router={router}",
            "--set",
            "preference=balanced",
            "--split",
            "test",
            "--limit",
            "2",
            "--out",
            str(out),
            "--store",
            str(frontier / "store"),
            "--data-root",
            str(data),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "configuration chosen by the router" in res.output
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["conversation_id"] == "conv-49" for r in rows)
    for r in rows:
        m = r["strategy_meta"]["auto"]
        assert m["configuration"] in ("rag-k1", "rag-k3") and set(m["predictions"]) == {"rag-k1", "rag-k3"}
        assert m["preference"] == BALANCED.model_dump() and r["usd"] > 0
    summary = json.loads((out / "summary.json").read_text())
    assert sum(summary["choices"]["route"]["configuration"].values()) == pytest.approx(1.0)
    assert summary["provenance"]["strategy_config"]["preference"] == "balanced"
    assert summary["provenance"]["prompt_versions"]["strategy"] == "auto-v1"
    # interrupted after one answer: the rerun says it resumes and answers only the other question
    (out / "predictions.jsonl").write_text(json.dumps(rows[0]) + "\n")
    res = run(
        app,
        [
            "eval",
            "--strategy",
            "auto",
            "--set",
            f"router={router}",
            "--set",
            "preference=balanced",
            "--split",
            "test",
            "--limit",
            "2",
            "--out",
            str(out),
            "--store",
            str(frontier / "store"),
            "--data-root",
            str(data),
        ],
    )
    assert res.exit_code == 0, res.output
    assert f"resuming {out}: 1 of 2 questions already answered" in " ".join(res.output.split())
    assert [json.loads(x)["id"] for x in (out / "predictions.jsonl").read_text().splitlines()] == [
        r["id"] for r in rows
    ]


@pytest.mark.data
def test_exported_rows_get_their_question_text_from_the_runs_data(locomo_slice):
    from memfrontier.eval.datasets import load_dataset
    from memfrontier.train.strategy_router import with_question_text

    data = locomo_slice("conv-41")
    run_config = {"dataset": "locomo", "split": "train", "data_root": str(data)}
    first = load_dataset("locomo", "train", data_root=data)[0].questions[0]
    rows = {first.id: {"id": first.id, "f1": 0.5}, "kept": {"id": "kept", "question": "As it was?", "f1": 1.0}}
    filled = with_question_text(rows, run_config)
    assert filled[first.id] == {"id": first.id, "f1": 0.5, "question": first.question} and first.question
    assert filled["kept"] is rows["kept"] and "question" not in rows[first.id]  # the caller's rows unchanged
    with pytest.raises(ValueError, match=r"1 exported question id\(s\) are not in the run's data \(conv-9:q0"):
        with_question_text({**rows, "conv-9:q0": {"id": "conv-9:q0"}}, run_config)
