"""The service's option policy (``memfrontier.server.options``): every field of every strategy's
config has a written decision, read from the field's metadata (or its type when unmarked), so a
remote caller (REST, MCP) reaches only the models, endpoints, files and caches the operator
configured; and images from the network are URLs, never the server's files."""

from __future__ import annotations

import pytest

from memfrontier.core.messages import check_network_images, messages_to_records
from memfrontier.core.types import Scope
from memfrontier.server.options import check_remote_options, remote_policy
from memfrontier.strategies import STRATEGIES

TENANT = "tenant"  # a value a remote caller may set (by its type: values only)
OPERATOR = "operator"  # marked operator_only(): it names or selects a model, endpoint, file or cache
OPERATOR_BY_TYPE = "operator (type)"  # unmarked, and its type holds free text: refused by the type rule


def but(*values: str) -> str:
    """A choice a remote caller may set, except ``values`` (marked operator_values(...))."""
    return f"tenant except {', '.join(values)}"


#: Every field of every registered strategy's config and the service's decision on it. A new field
#: fails test_every_config_field_is_classified until it is added here (and marked when it selects a
#: model, an endpoint, a file or a cache).
DECISIONS: dict[str, dict[str, str]] = {
    "longctx": {"max_context_tokens": TENANT, "reserve_tokens": TENANT},
    "rag": {
        "k": TENANT,
        "retrievers": TENANT,
        "unit": TENANT,
        "neighbours": TENANT,
        "max_tokens": TENANT,
        "neighbour_hits": TENANT,
        "turn_style": TENANT,
        "rerank": TENANT,
        "fold": TENANT,
        "excerpt_tokens": TENANT,
    },
    "oracle": {},
    "budgetmem": {
        "k": TENANT,
        "module_topk": TENANT,
        "tiering": but("capacity"),  # capacity builds clients for its own (hosted or embedded) models
        "tiers": TENANT,
        "router": OPERATOR,
        "greedy": TENANT,
        "max_relations": TENANT,
        "retrievers": TENANT,
        "tiering_options": OPERATOR,  # capacity presets and model specs
    },
    "memorycpt": {
        "episodic_k": TENANT,
        "semantic_k": TENANT,
        "ablation": TENANT,  # no_qad builds with the run's own model (env.llm)
        "construction_llm": OPERATOR,
        "summarizer_llm": OPERATOR,
        "summarizer_adapter": OPERATOR,
        "concurrency": TENANT,
    },
    "mempilot": {
        "pool": OPERATOR,  # every profile names models (table3: hosted; bench/local: embedded)
        "preference": TENANT,
        "answer_mode": TENANT,
        "bank": TENANT,  # imported reads the scope's imported items, which only a bank_file fills
        "compressor": but("auto", "llmlingua2"),  # LLMLingua-2 loads a model from the Hugging Face cache
        "adapter": OPERATOR,
        "max_rounds": TENANT,
        "temperature": TENANT,
        "constrained": TENANT,
        "first_turn_tools": TENANT,
        "answer_after_repeat": TENANT,
        "policy_max_tokens": TENANT,
        "max_observation_tokens": TENANT,
        "delegate_timeout_s": TENANT,
        "rollout_key": OPERATOR_BY_TYPE,
        "budget": TENANT,
        "bank_file": OPERATOR,
    },
    "automem": {
        "single_pass": TENANT,
        "k_max": TENANT,
        "judge_every_round": TENANT,
        "graph": but("neo4j"),  # neo4j: the graph server of the environment
        "window_turns": TENANT,
        "planner_llm": OPERATOR,
        "judge_llm": OPERATOR,
        "base_url": OPERATOR,
        "build_concurrency": TENANT,
        "limits": TENANT,
    },
    "auto": {"router": OPERATOR, "preference": TENANT, "budget": TENANT},
}


def decision(field) -> str:
    p = remote_policy(field)
    if not p.settable:
        return OPERATOR if p.marked else OPERATOR_BY_TYPE
    return but(*p.refused) if p.refused else TENANT


def test_every_config_field_is_classified():
    assert set(DECISIONS) == set(STRATEGIES)
    for name in STRATEGIES:
        cls = STRATEGIES[name].config_class
        got = {key: decision(f) for key, f in cls.model_fields.items()}
        assert got == DECISIONS[name], name


def test_refused_values_are_values_of_the_choice():
    for name in STRATEGIES:
        cls = STRATEGIES[name].config_class
        for key, f in cls.model_fields.items():
            refused = remote_policy(f).refused
            assert set(refused) <= set(cls.allowed(key)), (name, key)
            assert not refused or set(cls.allowed(key)) - set(refused), (name, key)  # some value stays open


@pytest.mark.parametrize(
    "strategy, options, message",
    [
        (
            "budgetmem",
            {"tiering": "capacity"},
            "strategy_options.tiering='capacity': not settable over the service (this value selects a model, an endpoint, "
            "a file or a cache the server's operator did not configure); choose one of: implementation, reasoning",
        ),
        ("mempilot", {"compressor": "llmlingua2"}, "strategy_options.compressor='llmlingua2': not settable"),
        ("mempilot", {"compressor": "auto"}, "choose one of: offline"),
        (
            "mempilot",
            {"pool": "local"},
            "strategy_options.pool: not settable over the service (it names a file, a model, "
            "an endpoint or a cache, which only the server's operator chooses)",
        ),
        ("mempilot", {"rollout_key": "7"}, "strategy_options.rollout_key: not settable"),
        ("automem", {"graph": "neo4j"}, "strategy_options.graph='neo4j': not settable"),
        ("budgetmem", {"tiering_options": {"models": "local"}}, "strategy_options.tiering_options: not settable"),
        ("auto", {"router": "/etc/passwd"}, "strategy_options.router: not settable"),
    ],
)
def test_refusals_name_the_option(strategy, options, message):
    with pytest.raises(ValueError) as e:
        check_remote_options(strategy, options)
    assert message in str(e.value)


@pytest.mark.parametrize(
    "strategy, options",
    [
        ("rag", {"k": 3, "retrievers": ["bm25"]}),
        ("budgetmem", {"tiering": "reasoning", "tiers": {"filter": "high"}, "k": 2}),
        ("budgetmem", {"tiering": "implementation"}),
        ("mempilot", {"compressor": "offline", "preference": {"quality": 1, "cost": 2}, "max_rounds": 3}),
        ("automem", {"graph": "none", "limits": {"rg_max_hits": 5}}),
        ("automem", {"graph": "ladybug"}),
        ("memorycpt", {"ablation": "no_qad"}),
        ("rag", {"nope": 1}),  # unknown keys are the config's to refuse
    ],
)
def test_values_only_options_pass(strategy, options):
    check_remote_options(strategy, options)


def test_a_refused_value_is_compared_exactly():
    check_remote_options("budgetmem", {"k": 1})
    with pytest.raises(ValueError, match="tiering='capacity'"):
        check_remote_options("budgetmem", {"tiering": "capacity"})
    check_remote_options("budgetmem", {"tiering": "Capacity"})  # not a value of the choice: the config refuses it
    with pytest.raises(ValueError, match="unknown strategy"):
        check_remote_options("nope", {})


def image(url):
    return [
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": url}}],
        }
    ]


@pytest.mark.parametrize(
    "url",
    [
        "/etc/passwd",
        "../secret.png",
        "file:///etc/passwd",
        "ftp://host/x.png",
        "http:relative.png",
        "https://",
        "C:\\img.png",
    ],
)
def test_network_images_are_http_or_data_urls(url):
    with pytest.raises(
        ValueError, match=r"^message 0\.content\[1\]\.image_url\.url: .* is not an http\(s\): or data: URL"
    ):
        check_network_images(image(url))
    with pytest.raises(ValueError, match=r"^message 1\.content\[0\]\.image_url: "):  # the string form of the part
        check_network_images(["hi", {"content": [{"type": "image_url", "image_url": url}]}])


@pytest.mark.parametrize(
    "url", ["https://example.org/cat.png", "HTTP://example.org/a.jpg", "data:image/png;base64,iVBORw0KGgo="]
)
def test_network_images_accept_urls(url):
    check_network_images(image(url))
    check_network_images(["plain text", {"content": None}, 3])  # malformed: left to messages_to_records


def test_the_python_api_keeps_local_image_paths():
    (rec,) = messages_to_records(image("/data/photos/cat.png"), scope=Scope(user_id="u"), session_id="s")
    assert [im.path for im in rec.images] == ["/data/photos/cat.png"]
    (rec,) = messages_to_records(image("DATA:image/png;base64,AA=="), scope=Scope(user_id="u"), session_id="s")
    assert [im.path for im in rec.images] == [None]  # a data URL is not a path, whatever its case
