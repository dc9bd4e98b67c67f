"""LongMemEval's scoring protocol: accuracy from a per-question-type judge (Wu et al., ICLR 2025,
Sec. 3 and App. "evaluation"), with the same CORRECT/WRONG label contract as the MemoryCPT judge.

The rules per type follow the benchmark's authors (the wording here is ours):

- ``single-session-user``, ``single-session-assistant``, ``multi-session``: the response must state
  the reference answer (or an equivalent one); extra correct detail is fine, a partial or different
  answer is wrong.
- ``temporal-reasoning``: as above, and a count of days/weeks/months off by one from the reference
  is still correct (whether the first or last day is counted varies).
- ``knowledge-update``: the reference is the latest value; a response that also mentions earlier
  values is correct when it gives the updated one as the answer.
- ``single-session-preference``: the reference is a rubric of what a personalised answer does;
  correct when the response follows it (not necessarily every point).
- abstention questions (ids ending in ``_abs``): correct when the response says the information is
  not available (or asks for it) instead of inventing an answer.

The judge is told the date the question was asked, as the answerer is, so that "how many days
ago" is graded against the same day.

Token F1 stays beside accuracy in the report, but it is meaningless for the preference questions,
whose gold is a rubric.
"""

from __future__ import annotations

from ..core.render import asked_on

PROMPT_VERSION = "judge-longmemeval-v1"
#: the version of a prompt that gives the question's date (:func:`judge_prompt` with ``question_date``)
DATED_PROMPT_VERSION = "judge-longmemeval-v1+date-v1"

QUESTION_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
    "single-session-preference",
)

_HEAD = (
    "You grade one response of a chat assistant that answers from its long-term memory of past "
    "conversations with the user.\n\n"
)
_TAIL = (
    '\nReturn ONLY a JSON object: {{"label": "CORRECT"}} or {{"label": "WRONG"}}.\n'
    "Do not add anything outside the JSON.\n"
)

_FACT = (
    "Question: {question}\nReference answer: {gold}\nResponse: {generated}\n\n"
    "Label the response CORRECT if it states the reference answer or an equivalent one; extra correct "
    "detail is fine. Label it WRONG if it gives a different answer, only part of a multi-part answer, "
    "or no answer.{extra}\n"
)

_RULES = {
    "temporal-reasoning": (
        " A count of days, weeks or months that differs from the reference by one "
        "(for example 18 days instead of 19) is still CORRECT, because whether the first or "
        "the last day is counted varies."
    ),
    "knowledge-update": (
        " The reference is the most recent value of something that changed over time. A response "
        "that also mentions earlier values is CORRECT as long as it gives the updated value as "
        "the answer."
    ),
}

_PREFERENCE = (
    "Question: {question}\nRubric of a good personalised response: {gold}\nResponse: {generated}\n\n"
    "Label the response CORRECT if it follows the rubric, i.e. it uses what the user said about their "
    "own preferences as the rubric describes (it need not cover every point). Label it WRONG if it "
    "ignores or contradicts those preferences.\n"
)

_ABSTENTION = (
    "Question: {question}\nWhy it cannot be answered: {gold}\nResponse: {generated}\n\n"
    "The conversation history does not contain the answer to this question. Label the response "
    "CORRECT if it says the information is not available or unknown (or asks the user for it). "
    "Label it WRONG if it gives an answer as if it knew.\n"
)


def judge_prompt(
    question_type: str,
    question: str,
    gold: str,
    generated: str,
    *,
    abstention: bool = False,
    question_date: str | None = None,
) -> str:
    """The judge prompt for one LongMemEval question; ``question_date`` (ISO timestamp, the time the
    question was asked) adds a line with that day before the question (``DATED_PROMPT_VERSION``);
    without it the prompt is ``PROMPT_VERSION``'s (an unreadable date is shown as given, as the answer
    prompt shows it). Raises ValueError for an unknown question type."""
    if question_type not in QUESTION_TYPES:
        raise ValueError(f"unknown LongMemEval question type {question_type!r}; expected one of {QUESTION_TYPES}")
    if abstention:
        body = _ABSTENTION
    elif question_type == "single-session-preference":
        body = _PREFERENCE
    else:
        body = _FACT.replace("{extra}", _RULES.get(question_type, ""))
    day = f"The question was asked on {asked_on(question_date)}.\n" if question_date else ""
    return _HEAD + day + body.format(question=question, gold=gold, generated=generated) + _TAIL.format()
