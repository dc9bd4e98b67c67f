"""A question runs under one effective budget: the caller's made stricter by the configuration's
own caps, in the strategy's work and in the answer call (a scripted model and a scripted view:
control flow only; the caps' arithmetic is the answerer's, tested with the ledger)."""

from __future__ import annotations

import asyncio

import pytest
from fakes import ScriptedClient

from memfrontier.api import AsyncMemory
from memfrontier.core.types import Budget, Context, Scope
from memfrontier.strategies import StrategyBase, effective_budget
from memfrontier.strategies.config import BudgetedConfig
from memfrontier.strategies.rag import RagConfig

MODEL = "gemma-3-270m-q4_k_m"
FACTS = "\n".join(f"Fact {i}: Ana keeps item number {i} in box {i}." for i in range(200))  # 2,000 words


class CappedConfig(BudgetedConfig):
    strategy = "capped"


class Capped(StrategyBase):
    """Two hundred lines of context whatever the question; remembers the budget it was given."""

    name = "capped"
    prompt_version = "capped-v1"
    recipes = ()
    config_class = CappedConfig

    async def context(self, query, env, preference, budget):
        self.seen = budget
        return Context(text=FACTS, evidence_ids=[])


def test_the_effective_budget_is_the_tighter_cap_by_cap():
    caller = Budget(max_usd=1e-4, max_tokens=5_000)
    own = CappedConfig(budget=Budget(max_tokens=300, max_proxy_s=2.0))
    assert effective_budget(own, caller) == Budget(max_usd=1e-4, max_tokens=300, max_proxy_s=2.0)
    assert effective_budget(CappedConfig(), caller) == caller  # no caps of its own
    assert effective_budget(RagConfig(), caller) == caller  # a configuration without the field


@pytest.mark.parametrize("own_cap", [None, 600])
def test_a_budget_set_only_in_the_configuration_binds_the_answer_call(tmp_path, minilm, own_cap):
    client = ScriptedClient(["box 7"], repeat_last=True, model_id=MODEL)
    mem = AsyncMemory.open(tmp_path / "store", llm=client, embedder=minilm)
    try:
        strat = Capped(CappedConfig(budget=None if own_cap is None else Budget(max_tokens=own_cap)))
        ans = asyncio.run(mem.answer("Where is item 7?", Scope(user_id="ana"), strat))
    finally:
        mem.close()
    prompt_words = ans.usage.query.input_tokens  # the scripted model's tokens are words
    if own_cap is None:
        assert strat.seen == Budget() and prompt_words > 2_000
        assert "budget.context_truncated" not in ans.usage.events
    else:
        # the strategy saw the cap, and the answer call kept within it (prompt + reserved answer tokens)
        assert strat.seen == Budget(max_tokens=own_cap)
        assert ans.usage.events["budget.context_truncated"] == 1
        assert prompt_words + ans.usage.query.output_tokens <= own_cap


def test_the_ledger_says_what_is_left_of_a_budget_with_calls_in_flight():
    from memfrontier.core.ledger import Call, Ledger

    ledger = Ledger()
    ledger.record(
        Call(stage="query", role="a", model_id="m", input_tokens=300, output_tokens=50, usd=2e-5, proxy_s=1.0)
    )
    ledger.record(Call(stage="construction", role="b", model_id="m", input_tokens=9_000, usd=1.0, proxy_s=60.0))
    budget = Budget(max_usd=5e-5, max_tokens=1_000, max_proxy_s=3.0)
    left = ledger.remaining(budget)  # construction is not the question's: 5e-5 - 2e-5, 1000 - 350, 3 - 1
    assert (left.max_usd, left.max_tokens, left.max_proxy_s) == (pytest.approx(3e-5), 650, pytest.approx(2.0))
    with ledger.reserve(1e-5, 100, 0.5):  # a call in flight holds its worst case
        left = ledger.remaining(budget)
        assert (left.max_usd, left.max_tokens, left.max_proxy_s) == (pytest.approx(2e-5), 550, pytest.approx(1.5))
        assert not ledger.exhausted(budget) and ledger.exhausted(Budget(max_tokens=450))  # 350 + 100 = 450
    assert ledger.remaining(Budget(max_tokens=200)).max_tokens == 0  # spent past the cap: 0, never negative
    assert ledger.exhausted(Budget(max_tokens=350)) and not ledger.exhausted(Budget(max_tokens=351))
    assert ledger.remaining(Budget()) == Budget() and not ledger.exhausted(Budget())


def test_the_largest_prompt_that_fits_inverts_the_price_and_the_latency_proxy():
    from memfrontier.core.pricebook import LatencyProfile, ModelPrice, PriceBook
    from memfrontier.llm.metered import MeteredLLM

    book = PriceBook(
        version="t",
        models={
            "m": ModelPrice(
                input_usd_per_mtok=1.0,
                output_usd_per_mtok=4.0,
                latency=LatencyProfile(base_s=0.5, in_s_per_token=0.001, out_s_per_token=0.01),
            )
        },
    )
    llm = MeteredLLM(ScriptedClient([], model_id="m"), book)
    # tokens: 1000 - 32 answer tokens = 968
    assert llm.max_prompt_tokens(Budget(max_tokens=1_000), 32) == 968
    # USD: (1e-3 - 4e-6 * 100) / 1e-6 = 600 prompt tokens
    assert llm.max_prompt_tokens(Budget(max_usd=1e-3), 100) == 600
    # proxy: (2.0 - 0.5 - 0.01 * 50) / 0.001 = 1000 prompt tokens; the tightest cap wins
    assert llm.max_prompt_tokens(Budget(max_proxy_s=2.0), 50) == 1_000
    # all three at 100 answer tokens: USD 600, tokens 600, proxy (2.0 - 0.5 - 1.0) / 0.001 = 500
    assert llm.max_prompt_tokens(Budget(max_usd=1e-3, max_tokens=700, max_proxy_s=2.0), 100) == 500
    assert llm.max_prompt_tokens(Budget(), 100) is None
    assert llm.max_prompt_tokens(Budget(max_tokens=10), 32) == -22  # not even an empty prompt fits
