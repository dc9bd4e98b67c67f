"""LongMemEval's per-type judge prompts (the rules its authors apply), checked per type."""

import pytest

from memfrontier.eval.longmemeval_judge import QUESTION_TYPES, judge_prompt


def test_every_type_has_its_rule_and_the_label_contract():
    prompts = {t: judge_prompt(t, "Q?", "G", "R") for t in QUESTION_TYPES}
    for p in prompts.values():
        assert "Question: Q?" in p and "Response: R" in p and '{"label": "CORRECT"}' in p
    assert "differs from the reference by one" in prompts["temporal-reasoning"]
    assert "differs from the reference by one" not in prompts["multi-session"]
    assert "most recent value" in prompts["knowledge-update"]
    assert "Rubric of a good personalised response: G" in prompts["single-session-preference"]


def test_abstention_overrides_the_type():
    p = judge_prompt("multi-session", "Q?", "never mentioned", "I don't know", abstention=True)
    assert "does not contain the answer" in p and "Why it cannot be answered: never mentioned" in p


def test_the_question_date_reaches_the_judge_and_its_version():
    from memfrontier.eval.judge import judge_prompt_version

    undated = judge_prompt("temporal-reasoning", "How many days ago did I buy it?", "19 days", "18 days")
    dated = judge_prompt(
        "temporal-reasoning",
        "How many days ago did I buy it?",
        "19 days",
        "18 days",
        question_date="2023-05-30T14:00:00",
    )
    assert "asked on" not in undated
    assert "The question was asked on Tuesday, 30 May 2023.\nQuestion: How many days ago" in dated
    assert dated.replace("The question was asked on Tuesday, 30 May 2023.\n", "") == undated
    assert judge_prompt_version("longmemeval_s", dated=True) == "judge-longmemeval-v1+date-v1"
    assert judge_prompt_version("longmemeval_s") == "judge-longmemeval-v1"
    assert judge_prompt_version("locomo", dated=True) == "judge-memorycpt-v1"  # that judge is given no date


def test_unknown_type_is_refused():
    with pytest.raises(ValueError, match="unknown LongMemEval question type"):
        judge_prompt("open-domain", "Q", "G", "R")


def test_braces_in_text_do_not_break_formatting():
    p = judge_prompt("single-session-user", "What is {x}?", "{y}", "{z}")
    assert "What is {x}?" in p and "Reference answer: {y}" in p


def test_judge_agreement_counts_by_hand():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_judge_agreement.py"
    spec = importlib.util.spec_from_file_location("bench_judge_agreement", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # (hand label, verdict): 3 of 5 agree; one false positive, one false negative; both raters say
    # CORRECT 3 of 5 times: p_e = 0.6 * 0.6 + 0.4 * 0.4 = 0.52, kappa = (0.6 - 0.52) / 0.48
    c = bench.counts([(True, True), (True, False), (False, False), (False, True), (True, True)])
    assert c["n"] == 5 and c["accuracy"] == pytest.approx(0.6)
    assert (c["false_positives"], c["false_negatives"]) == (1, 1)
    assert c["kappa"] == pytest.approx(0.08 / 0.48)
    assert bench.counts([(True, True), (True, True)])["kappa"] == 0.0  # p_e = 1: no agreement beyond chance to measure
    assert bench.counts([]) == {"n": 0}
