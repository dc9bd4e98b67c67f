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
