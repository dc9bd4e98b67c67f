"""One pydantic config per strategy: validation (keys, strict numbers, choices), the config hash,
the CLI's --set / --strategy-config / deprecated flags mapped onto the config, `memfrontier
config`, and `ask` refusing to answer from a view that was never built."""

import hashlib
import json

import pytest
from typer.testing import CliRunner

from memfrontier.cli import app
from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.types import PRESETS, Budget, Preference, Scope
from memfrontier.eval.config import EvalConfig
from memfrontier.eval.summary import _config_provenance
from memfrontier.strategies import (
    STRATEGIES,
    AutoConfig,
    BudgetMemConfig,
    MemoryCPTConfig,
    MemPilotConfig,
    RagConfig,
    Strategy,
    StrategyConfigError,
    get_strategy,
    resolve_preference,
    strategy_config,
)
from memfrontier.strategies.budgetmem.config import MODULES, TIERINGS, TIERS
from memfrontier.strategies.memorycpt.config import ABLATIONS

run = CliRunner().invoke


#: Every option of a rag config with k=3 (the rest at their defaults), as configs dump them.
RAG_K3 = {
    "k": 3,
    "retrievers": ["dense", "bm25"],
    "unit": "chunk",
    "neighbours": 0,
    "neighbour_hits": None,
    "max_tokens": None,
    "rerank": False,
    "fold": 0.8,
    "excerpt_tokens": None,
    "turn_style": "said",
}


def test_every_strategy_has_a_config_whose_defaults_build_it():
    for name, cls in STRATEGIES.items():
        if name == "auto":  # a router file is its one required option
            with pytest.raises(
                StrategyConfigError,
                match="strategy auto: router is required: A router file from `memfrontier train strategy-router`",
            ):
                get_strategy(name)
            continue
        s = get_strategy(name)
        assert isinstance(s.config, cls.config_class) and s.config.strategy == name
    assert get_strategy("rag").config.k == 8 and get_strategy("budgetmem").config.k == 5
    m = get_strategy("memorycpt")
    assert (m.config.episodic_k, m.config.semantic_k, m.config.ablation) == (20, 50, "none")
    assert get_strategy("automem", single_pass=True).k_max == 1
    # the config is the source: Cls(config); no option is a constructor keyword any more
    assert STRATEGIES["rag"](RagConfig(k=3)).config.k == 3 and STRATEGIES["rag"]().config == RagConfig()
    with pytest.raises(TypeError):
        STRATEGIES["rag"](k=3)
    with pytest.raises(TypeError, match="Rag takes a RagConfig, got BudgetMemConfig"):
        STRATEGIES["rag"](BudgetMemConfig())


def test_the_protocol_declares_what_the_runner_reads():
    declared = set(Strategy.__annotations__) | set(vars(Strategy))
    assert {"config", "config_class", "construction_usage", "is_built", "build", "context"} <= declared
    for name in ("rag", "longctx", "oracle", "budgetmem"):  # raw views: nothing to build
        s = get_strategy(name)
        assert s.is_built(None, Scope(user_id="u")) is True and s.construction_usage(None, Scope(user_id="u")) == {}


def test_choice_names_are_defined_once_by_the_configs():
    assert MODULES == ("filter", "entity", "temporal", "topic", "summary")
    assert TIERS == ("low", "mid", "high") and TIERINGS == ("implementation", "reasoning", "capacity")
    assert ABLATIONS == ("none", "no_qad", "no_qar", "no_fs")
    from memfrontier.eval.sweeps import budgetmem as bm_sweep
    from memfrontier.eval.sweeps import memorycpt
    from memfrontier.strategies.budgetmem import router, tiering

    assert router.MODULES is MODULES and tiering.TIERS is TIERS and bm_sweep.FIXED_TIERS is TIERS
    assert memorycpt.ABLATIONS is ABLATIONS


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"k": 2.5}, ["k=2.5", "valid integer"]),
        ({"k": "2"}, ["k='2'", "valid integer"]),
        ({"k": True}, ["k=True", "valid integer"]),
        ({"k": 0}, ["k=0", "greater than or equal to 1"]),
        ({"kk": 3}, ["unknown key 'kk'", "keys: k, retrievers"]),
        ({"retrievers": ["dense", "sparse"]}, ["unknown retrievers", "dense, bm25"]),
        ({"unit": "turn", "rerank": "yes"}, ["rerank='yes'", "valid boolean"]),
        ({"unit": "turn", "rerank": 1}, ["rerank=1", "valid boolean"]),
    ],
)
def test_rag_config_errors_name_the_key_and_what_is_allowed(bad, words):
    with pytest.raises(StrategyConfigError) as e:
        get_strategy("rag", **bad)
    assert str(e.value).startswith("strategy rag: ")
    for w in words:
        assert w in str(e.value)


def test_config_rules_of_the_papers():
    with pytest.raises(StrategyConfigError, match="unknown tiers 'max'; choose one of: low, mid, high"):
        BudgetMemConfig.from_options({"tiers": "max"})
    assert BudgetMemConfig.from_options({"tiers": {"filter": "low"}}).tiers == {"filter": "low"}
    with pytest.raises(StrategyConfigError, match="episodic_k and semantic_k are both 0"):
        MemoryCPTConfig.from_options({"episodic_k": 0, "semantic_k": 0})
    assert MemoryCPTConfig.from_options({"ablation": "no-qar"}).ablation == "no_qar"
    with pytest.raises(StrategyConfigError, match="unknown preference preset 'fast'"):
        MemPilotConfig.from_options({"preference": "fast"})
    with pytest.raises(StrategyConfigError, match="preference.cost=-1"):
        MemPilotConfig.from_options({"preference": {"cost": -1}})
    with pytest.raises(StrategyConfigError, match="strategy mempilot: pool: 'nowhere.yaml' is neither"):
        MemPilotConfig.from_options({"pool": "nowhere.yaml"})
    with pytest.raises(StrategyConfigError, match="strategy automem: unknown key 'limits.rg_max_hitz'"):
        strategy_config("automem", limits={"rg_max_hitz": 3})
    assert get_strategy("automem", limits={"rg_max_hits": 3}).config.limits.rg_max_hits == 3
    with pytest.raises(StrategyConfigError, match="single_pass='no'"):  # a switch is true or false only
        strategy_config("automem", single_pass="no")
    assert strategy_config("automem", {"single_pass": False}).single_pass is False
    with pytest.raises(StrategyConfigError, match="expected RagConfig"):
        strategy_config("rag", BudgetMemConfig())


@pytest.mark.parametrize("field", ["quality", "cost", "latency"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), -0.5])
def test_preference_weights_are_finite_and_not_negative(field, value):
    with pytest.raises(ValueError, match=f"{field} must be a finite number >= 0"):
        Preference(**{field: value})
    with pytest.raises(StrategyConfigError, match=f"preference.{field}=.*{field} must be a finite number >= 0"):
        MemPilotConfig.from_options({"preference": {field: value}})


@pytest.mark.parametrize("field", ["max_usd", "max_tokens", "max_proxy_s"])
def test_budget_caps_are_finite_and_not_negative(field):
    bad = [-1] + ([] if field == "max_tokens" else [float("nan"), float("inf")])
    for value in bad:
        with pytest.raises(ValueError, match=f"{field} must be a finite number >= 0"):
            Budget(**{field: value})
        with pytest.raises(StrategyConfigError, match=f"budget.{field}="):
            AutoConfig.from_options({"router": __file__, "budget": {field: value}})
    assert getattr(Budget(**{field: 0}), field) == 0 and getattr(Budget(), field) is None  # None: no cap


def test_one_preference_type_for_presets_weights_and_configs():
    assert PRESETS == ("perf", "balanced", "cost")
    assert Preference.preset("balanced") == Preference(quality=1.0, cost=0.5, latency=0.5)
    assert Preference.of("cost") == Preference(quality=1, cost=1, latency=0.25) and Preference.of(None) is None
    with pytest.raises(ValueError, match="unknown preference preset 'fast'"):
        Preference.of("fast")
    with pytest.raises(ValueError, match="Extra inputs"):
        Preference(speed=1.0)
    given = Preference(quality=1.0, cost=2.0)
    assert MemPilotConfig(preference=given).preference is given  # a Preference given by code is the config's value
    assert MemPilotConfig(preference="cost").preference == "cost"
    assert AutoConfig(router=__file__, budget=Budget(max_usd=0.01)).budget == Budget(max_usd=0.01)


def test_the_config_preference_wins_else_the_caller_else_perf():
    balanced, cost = Preference.preset("balanced"), Preference.preset("cost")
    ledger = Ledger()
    with use_ledger(ledger):
        assert resolve_preference(None, None) == (Preference.preset("perf"), "default")
        assert resolve_preference(None, cost) == (cost, "caller")
        assert resolve_preference("balanced", None) == (balanced, "config")
        assert ledger.events["preference.config_over_caller"] == 0
        # both: the configuration's preference, counted so that it is never silent
        assert resolve_preference("balanced", cost) == (balanced, "config")
        assert resolve_preference(Preference(cost=2.0), cost) == (Preference(cost=2.0), "config")
        assert resolve_preference("balanced", balanced) == (balanced, "config")  # the same: nothing to count
    assert ledger.events["preference.config_over_caller"] == 2


def test_config_hash_is_canonical_json_of_every_option():
    cfg = strategy_config("rag", {"k": 3})
    expected = hashlib.sha256(
        b'{"excerpt_tokens":null,"fold":0.8,"k":3,"max_tokens":null,"neighbour_hits":null,"neighbours":0,"rerank":false,'
        b'"retrievers":["dense","bm25"],'
        b'"strategy":"rag","turn_style":"said","unit":"chunk"}'
    ).hexdigest()[:16]
    assert cfg.config_hash() == expected
    assert strategy_config("rag").config_hash() == strategy_config("rag", {"k": 8}).config_hash()
    assert _config_provenance(get_strategy("rag", k=3)) == {
        "strategy_config": RAG_K3,
        "strategy_config_hash": expected,
    }
    assert strategy_config("oracle").config_hash() == hashlib.sha256(b'{"strategy":"oracle"}').hexdigest()[:16]


def test_set_values_are_read_as_yaml_and_keys_are_checked():
    assert RagConfig.parse_assignment("k=3") == (("k",), 3)
    assert RagConfig.parse_assignment("retrievers=[bm25]") == (("retrievers",), ["bm25"])
    assert MemPilotConfig.parse_assignment("budget.max-usd=0.001") == (("budget", "max_usd"), 0.001)
    assert MemPilotConfig.parse_assignment("rollout_key=7") == (("rollout_key",), "7")  # text field stays text
    assert MemPilotConfig.parse_assignment("preference={quality: 1, cost: 2, latency: 0}")[1] == {
        "quality": 1,
        "cost": 2,
        "latency": 0,
    }
    with pytest.raises(StrategyConfigError, match="--set takes KEY=VALUE"):
        RagConfig.parse_assignment("k")
    with pytest.raises(StrategyConfigError, match="unknown key 'depth'; keys: k, retrievers"):
        RagConfig.parse_assignment("depth=3")


def test_eval_config_validates_strategy_options_when_made():
    with pytest.raises(ValueError, match="strategy rag: k=2.5"):
        EvalConfig(strategy="rag", strategy_options={"k": 2.5})
    assert EvalConfig(strategy="rag", strategy_options=RagConfig(k=3)).strategy_options == RAG_K3


@pytest.fixture
def captured(monkeypatch):
    """The EvalConfig `eval` would run (the run itself is replaced: this tests option plumbing)."""
    import memfrontier.eval.runner as runner

    got = []

    async def fake_run_eval(cfg, on_progress=None):
        got.append(cfg)
        raise ValueError("stopped before running")

    monkeypatch.setattr(runner, "run_eval", fake_run_eval)
    return got


def test_set_and_file_give_the_same_options(tmp_path, captured):
    out = ["--out", str(tmp_path / "o")]
    res = run(app, ["eval", "--strategy", "memorycpt", "--set", "episodic_k=4", "--set", "ablation=no-fs", *out])
    assert res.exit_code == 2 and "stopped before running" in res.output
    res = run(app, ["eval", "--strategy", "memorycpt", "--set", "episodic_k=4", "--set", "ablation=no_fs", *out])
    f = tmp_path / "cpt.yaml"
    f.write_text("strategy: memorycpt\nepisodic_k: 4\nablation: no_fs\nsemantic_k: 9\n")
    res = run(app, ["eval", "--strategy", "memorycpt", "--strategy-config", str(f), "--set", "semantic_k=50", *out])
    assert [c.strategy_options for c in captured] == [{"episodic_k": 4, "ablation": "no_fs"}] * 2 + [
        {"episodic_k": 4, "ablation": "no_fs", "semantic_k": 50}
    ]
    res = run(
        app,
        [
            "eval",
            "--strategy",
            "mempilot",
            "--set",
            "budget.max_usd=0.01",
            "--set",
            "preference.quality=1",
            "--set",
            "preference.cost=2",
            "--set",
            "preference.latency=0",
            *out,
        ],
    )
    assert captured[-1].strategy_options == {
        "budget": {"max_usd": 0.01, "max_tokens": None, "max_proxy_s": None},
        "preference": {"quality": 1.0, "cost": 2.0, "latency": 0.0},
    }
    assert captured[-1].dataset == "locomo" and captured[-1].seed == 42 and captured[-1].out == tmp_path / "o"


def test_cli_option_errors_name_the_key_and_run_nothing(tmp_path, captured):
    out = ["--out", str(tmp_path / "o")]
    res = run(app, ["eval", "--strategy", "rag", "--set", "k=2.5", *out])
    assert res.exit_code == 2 and "strategy rag: k=2.5: Input should be a valid integer" in res.output
    res = run(app, ["eval", "--strategy", "budgetmem", "--set", "tiers=top", *out])
    assert res.exit_code == 2 and "unknown tiers 'top'; choose one of: low, mid, high" in res.output
    res = run(app, ["eval", "--strategy", "rag", "--set", "depth=2", *out])
    assert res.exit_code == 2 and "unknown key 'depth'; keys: k, retrievers" in res.output
    res = run(app, ["eval", "--strategy", "budgetmem", "--tiers", "max", *out])  # the retired flag
    assert res.exit_code == 2 and "No such option: --tiers" in res.output
    f = tmp_path / "other.json"
    f.write_text(json.dumps({"strategy": "budgetmem", "k": 3}))
    res = run(app, ["eval", "--strategy", "rag", "--strategy-config", str(f), *out])
    assert res.exit_code == 2 and "is for strategy 'budgetmem', not 'rag'" in " ".join(res.output.split())
    res = run(app, ["eval", "--strategy", "auto", *out])  # a required option is named by its key
    assert (
        res.exit_code == 2
        and "strategy auto: router is required: A router file from `memfrontier train strategy-router`" in res.output
    )
    res = run(app, ["eval", "--strategy", "magic", *out])
    assert res.exit_code == 2 and "unknown strategy 'magic'" in res.output
    assert captured == [] and not (tmp_path / "o").exists()


def test_config_command_lists_keys_types_defaults_and_docs():
    res = run(app, ["config", "budgetmem", "--json"])
    assert res.exit_code == 0
    rows = {r["name"]: r for r in json.loads(res.output)["budgetmem"]}
    assert rows["k"] == {
        "name": "k",
        "type": "int",
        "required": False,
        "default": 5,
        "doc": "Chunks retrieved per question (top-K, Sec. 5.2: K=5).",
    }
    res = run(app, ["config", "auto", "--json"])
    assert [(r["name"], r["required"], r["default"]) for r in json.loads(res.output)["auto"]][0] == (
        "router",
        True,
        None,
    )
    assert "required" in run(app, ["config", "auto"], env={"COLUMNS": "200"}).output
    assert rows["tiering"]["type"] == "'implementation' | 'reasoning' | 'capacity'"
    res = run(app, ["config", "--json"])
    assert list(json.loads(res.output)) == [*STRATEGIES, "rag-turns", "rag-turns-rr"]  # families, then named
    res = run(app, ["ask", "--help"], env={"COLUMNS": "200"})
    assert "longctx | rag | oracle | budgetmem | memorycpt | mempilot | automem" in res.output
    assert "or a named configuration: rag-turns | rag-turns-rr" in " ".join(res.output.split())


def test_a_named_configuration_is_its_strategy_with_its_options_wherever_a_name_is_read(tmp_path):
    """rag-turns-rr is rag with six options: the same config (hash), the same eval run identity as
    the spelled-out one, the default frontier spec's row with the options of its published run, and
    options given with the name override its own."""
    from pathlib import Path

    from memfrontier.frontier.spec import DEFAULT_SPEC, load_spec

    spelled = {
        "unit": "turn",
        "retrievers": ["dense", "bm25", "chunk"],
        "k": 64,
        "max_tokens": 672,
        "turn_style": "colon",
        "rerank": True,
    }
    named = strategy_config("rag-turns-rr")
    assert isinstance(named, RagConfig) and named.config_hash() == strategy_config("rag", spelled).config_hash()
    assert strategy_config("rag-turns-rr", {"k": 32}).k == 32 and strategy_config("rag-turns-rr").k == 64
    # an option a named configuration refuses is named with it and the options it stands for
    stands = "strategy rag-turns-rr (rag with unit=turn, retrievers=['dense', 'bm25', 'chunk'], k=64, max_tokens=672"
    with pytest.raises(StrategyConfigError) as e:
        strategy_config("rag-turns-rr", {"k": 0})
    assert str(e.value).startswith(stands) and str(e.value).endswith(
        "): k=0: Input should be greater than or equal to 1"
    )
    with pytest.raises(StrategyConfigError, match=r"rerank=True\): neighbours, .* apply to unit=turn only$"):
        strategy_config("rag-turns-rr", {"unit": "chunk"})
    for name in ("rag", "rag-turns-rr"):
        with pytest.raises(StrategyConfigError, match=f"^strategy {name}: options must be a mapping .*, got list$"):
            strategy_config(name, [("k", 4)])
    assert strategy_config("rag-turns", RagConfig(k=16)).k == 16  # a config given with the name: its set fields win
    assert strategy_config("rag-turns").rerank is False and strategy_config("rag-turns").max_tokens == 672
    with pytest.raises(ValueError, match="available: auto, .*, rag, rag-turns, rag-turns-rr$"):
        strategy_config("rag-turns-xx")
    cfg = EvalConfig(strategy="rag-turns-rr", out=tmp_path / "r")
    assert (cfg.strategy, cfg.strategy_options) == ("rag", spelled)
    assert cfg.identity() == EvalConfig(strategy="rag", strategy_options=spelled, out=tmp_path / "s").identity()
    published = Path(__file__).parents[1] / "results" / "frontier-locomo-full-1.5b" / "configs"
    spec = {fc.label: fc for fc in load_spec(DEFAULT_SPEC).configurations}
    for label in ("rag-turns", "rag-turns-rr"):
        run_json = json.loads((published / label / "run.json").read_text())
        assert (spec[label].strategy, spec[label].options) == (run_json["strategy"], run_json["strategy_options"])
    # the CLI: --strategy takes it, `config` shows its values as the defaults
    rows = {r["name"]: r for r in json.loads(run(app, ["config", "rag-turns-rr", "--json"]).output)["rag-turns-rr"]}
    assert (rows["max_tokens"]["default"], rows["rerank"]["default"], rows["neighbours"]["default"]) == (672, True, 0)
    res = run(app, ["ask", "x", "--strategy", "rag-turn"], env={"COLUMNS": "200"})
    assert res.exit_code == 2 and "rag-turns, rag-turns-rr" in " ".join(res.output.split())


def test_ask_refuses_a_view_that_was_never_built(tmp_path):
    f = tmp_path / "msgs.jsonl"
    f.write_text(json.dumps({"content": "Ana moved to Lisbon in May.", "speaker": "Ana"}) + "\n")
    store = str(tmp_path / "store")
    assert run(app, ["ingest", "--store", store, "--file", str(f), "--user-id", "ana"]).exit_code == 0
    views = {s: f"{s} memory view" for s in ("memorycpt", "mempilot", "automem")}
    for strategy, view in {**views, "rag-turns-rr": "turn view (rag, unit=turn)"}.items():
        res = run(app, ["ask", "Where did Ana move?", "--store", store, "--user-id", "ana", "--strategy", strategy])
        text = " ".join(res.output.split())
        assert res.exit_code == 2, (strategy, res.output)
        assert f"the {view} of this scope was never built" in text
        assert 'ask again with build=True (REST "build": true, MCP build: true, CLI --build)' in text
    # options given with a named configuration are read over its own: a turn budget, not a chunk option
    res = run(
        app,
        ["ask", "Where did Ana move?", "--store", store, "--user-id", "ana", "--strategy", "rag-turns-rr"]
        + ["--set", "max_tokens=300", "--set", "neighbours=1"],
    )
    assert res.exit_code == 2 and "the turn view (rag, unit=turn) of this scope was never built" in " ".join(
        res.output.split()
    ), res.output


@pytest.mark.slow
def test_ask_build_builds_the_view_reports_its_cost_and_then_answers(tmp_path):
    f = tmp_path / "msgs.jsonl"
    f.write_text(json.dumps({"content": "Ana moved to Lisbon in May.", "speaker": "Ana"}) + "\n")
    store = str(tmp_path / "store")
    run(app, ["ingest", "--store", store, "--file", str(f), "--user-id", "ana"])
    args = [
        "ask",
        "Where did Ana move?",
        "--store",
        store,
        "--user-id",
        "ana",
        "--strategy",
        "mempilot",
        "--set",
        "compressor=offline",
        "--set",
        "max_rounds=1",
        "--set",
        "policy_max_tokens=32",
        "--json",
    ]
    res = CliRunner().invoke(app, args + ["--build"])
    assert res.exit_code == 0, res.output
    assert "built the mempilot view: 0 calls" in res.stderr  # offline compression calls no model
    assert json.loads(res.stdout)["strategy"] == "mempilot"
    res = CliRunner().invoke(app, args)  # built now: no refusal, nothing rebuilt
    assert res.exit_code == 0 and "built the" not in res.stderr


def test_one_set_parser_reads_a_trainers_options_as_a_strategys():
    from memfrontier.cli.fields import model_values
    from memfrontier.train.configs import TurnRerankerConfig

    got = model_values(TurnRerankerConfig, {"set_options": ("longmemeval-s=0", "candidates=32")}, set())
    assert got == {"longmemeval_s": 0, "candidates": 32}  # '-' read as '_', values as YAML
    with pytest.raises(ValueError, match="unknown key 'nope'; keys: out, store, data_root"):
        model_values(TurnRerankerConfig, {"set_options": ("nope=1",)}, set())
    with pytest.raises(ValueError, match="--set takes KEY=VALUE, got 'candidates'"):
        model_values(TurnRerankerConfig, {"set_options": ("candidates",)}, set())
