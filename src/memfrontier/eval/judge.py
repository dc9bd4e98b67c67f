"""The LLM judge (MemoryCPT App. B judge prompt) with a strict label parser.

Judge calls are evaluation, not part of answering: the runner records them in a separate
ledger so they never enter a question's cost.
"""

from __future__ import annotations

from ..core.ledger import count_event
from ..llm.metered import MeteredLLM
from .metrics import parse_judge_label

PROMPT_VERSION = "judge-memorycpt-v1"

JUDGE_TEMPLATE = (
    "Your task is to label an answer to a question as 'CORRECT' or 'WRONG'.\n"
    "You will be given a question, a 'gold' (ground truth) answer, and a generated answer.\n"
    "The point of the question is to ask about something one user should know about the other user "
    "based on their prior conversations. The gold answer is usually concise. The generated answer might "
    "be longer—be GENEROUS: as long as it touches on the same topic/fact as the gold answer, mark it "
    "CORRECT. For time questions, if both refer to the same date/period (even with different formats), "
    "mark CORRECT.\n\n"
    "Question: {question}\n\n"
    "Gold answer: {gold}\n\n"
    "Generated answer: {generated}\n\n"
    'Return ONLY a JSON object: {{"label": "CORRECT"}} or {{"label": "WRONG"}}.\n'
    "Do NOT include both. Do NOT add commentary outside the JSON.\n"
)

LABEL_SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["CORRECT", "WRONG"]}},
    "required": ["label"],
}


class Judge:
    """Returns True (CORRECT), False (WRONG) or None (unparseable: counted as ``judge_error``)."""

    prompt_version = PROMPT_VERSION

    def __init__(self, llm: MeteredLLM):
        self.llm = llm

    async def __call__(self, question: str, gold: str, generated: str) -> bool | None:
        prompt = JUDGE_TEMPLATE.format(question=question, gold=gold, generated=generated)
        out = await self.llm.complete([{"role": "user", "content": prompt}], role="judge",
                                      max_tokens=16, temperature=0.0, json_schema=LABEL_SCHEMA)
        label = parse_judge_label(out.text)
        if label is None:
            count_event("judge_error")
            return None
        return label == "CORRECT"


def make_judge(mem, judge_llm: str | None = None, base_url: str | None = None) -> Judge:
    """A :class:`Judge` on ``judge_llm`` (an LLM spec) or, by default, ``mem``'s answer model,
    made by :meth:`~memfrontier.strategies.base.MemoryEnv.model`: priced by the run's price book,
    ``price_as`` and ``allow_unpriced``."""
    return Judge(mem.env.model(judge_llm, "judge", base_url=base_url))
