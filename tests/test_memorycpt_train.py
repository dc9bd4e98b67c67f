"""MemoryCPT's two training stages at smoke scale on the CPU, through the same paths the CLI uses:
construction traces -> ``export sft`` -> LoRA-A (``train_lora_sft``) -> a merged checkpoint that
serves as the construction model; RRF states -> LoRA-B GRPO with the cost-aware reward (Eq. 16),
the frozen embedded answerer scoring every sampled summary -> an adapter the strategy loads."""

from __future__ import annotations

import asyncio
import json

import pytest
from test_memorycpt import SCOPE, ScriptedClient, good_script, records_two_sessions

from memfrontier.api import Memory
from memfrontier.core.pricebook import PriceBook, UnpricedModelError
from memfrontier.llm.metered import MeteredLLM
from memfrontier.strategies import MemoryCPTConfig, MemoryEnv
from memfrontier.strategies.memorycpt.pipeline import (
    MemoryCPT,
    render_candidates,
    summary_messages,
)
from memfrontier.train.configs import QADConfig
from memfrontier.train.cost_reward import SummaryCostModel
from memfrontier.train.grpo import train_grpo
from memfrontier.train.lora_sft import train_lora_sft
from memfrontier.train.qar import SummaryReward
from memfrontier.train.sft_export import export_sft


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A real store + bank built by the pipeline (scripted construction model: fast and fixed)."""
    root = tmp_path_factory.mktemp("cpt-train")
    m = Memory.open(root / "mem")
    m.aio.store.add(records_two_sessions())
    strat = MemoryCPT(
        MemoryCPTConfig(episodic_k=2, semantic_k=2),
        construction_llm=MeteredLLM(ScriptedClient(good_script), PriceBook.load(), allow_unpriced=True),
    )
    asyncio.run(m.aio.construct(strat, SCOPE))
    yield root, m, strat
    m.close()


@pytest.mark.slow
def test_qad_sft_on_exported_traces_gives_a_serving_construction_model(built):
    root, m, strat = built
    counts = export_sft([strat.bank(m.aio.env).path], root / "sft", m.aio.store.embedder)
    assert counts["segmenter"] == 2 and counts["semantic_extractor"] >= 2
    res = train_lora_sft(
        QADConfig(
            data=[root / "sft"],
            out=root / "qad",
            max_steps=1,
            cutoff_tokens=1024,
            rank=4,
            lora_alpha=8,
            val_fraction=0.25,
        )
    )
    assert res.steps == 1 and res.n_train + res.n_val == sum(counts.values()) - res.n_too_long
    assert res.merged_dir is not None and (res.merged_dir / "config.json").is_file()
    cpt = MemoryCPT(MemoryCPTConfig(construction_llm=f"hf:{res.merged_dir}"))
    with pytest.raises(UnpricedModelError):  # a local checkpoint is not in the price book: the run must say so
        cpt.construction_model(m.aio.env)
    env = MemoryEnv(
        store=m.aio.store,
        answer_llm=m.aio.env.answer_llm,
        llm=MeteredLLM(m.aio.env.llm.client, m.aio.env.llm.prices, allow_unpriced=True),
    )
    llm = cpt.construction_model(env)
    assert llm.model_id == "qad/merged"
    out = asyncio.run(
        llm.complete(
            [{"role": "user", "content": "Messages:\n1. [2023-05-08 13:56] Evan: hi\n\nJSON:"}],
            role="segmenter",
            max_tokens=8,
        )
    )
    assert out.output_tokens >= 1
    assert cpt.bank(env).path.name.startswith("memorycpt-hf_")  # its memories never mix with the base's


@pytest.mark.slow
def test_qar_grpo_with_the_cost_aware_reward_trains_an_adapter_the_strategy_uses(built):
    root, m, strat = built
    question = "What did Evan buy?"
    episodes, facts = strat.candidates(question, SCOPE, m.aio.env)
    pool = [
        {
            "prompt": summary_messages(question, render_candidates(episodes, facts)),
            "question": question,
            "answer": "a Prius",
            "category": "4",
        }
    ]
    reward = SummaryReward(m.aio.answerer, SummaryCostModel.from_pricebook(PriceBook.load()), alpha=0.8)
    try:
        res = train_grpo(
            pool, reward, root / "qar", max_steps=1, num_generations=2, max_completion_tokens=12, rank=4, alpha=8
        )
    finally:
        reward.close()
    assert len(reward.history) == 2  # one group of two summaries, each answered by the frozen answerer
    for h in reward.history:  # Eq. 16 with the book's prices, recomputed from what was logged
        cost = SummaryCostModel.from_pricebook(PriceBook.load())
        assert h["reward"] == pytest.approx(cost.reward(h["f1"], h["summary_tokens"], h["answer_tokens"], 0.8))
    log = [json.loads(line) for line in res.train_log.read_text().splitlines()]
    assert any("reward_std" in r for r in log)
    assert res.lora_delta_l2 > 0 and (res.adapter_dir / "adapter_config.json").is_file()
    served = MemoryCPT(
        MemoryCPTConfig(episodic_k=2, semantic_k=2, summarizer_adapter=str(res.adapter_dir)),
        construction_llm=strat.construction_llm,
    )
    served.use_bank(m.aio.env, strat.bank(m.aio.env))  # same store, same construction model: the built bank
    ans = m.ask(question, user_id=SCOPE.user_id, strategy=served)
    summ = ans.usage.by_role["summarizer"]
    assert summ.calls == 1 and summ.output_tokens >= 1 and summ.unpriced_calls == 0  # priced as its base
    assert ans.evidence_ids
