"""The LLM judge (MemoryCPT App. B judge prompt) with a strict label parser.

Judge calls are evaluation, not part of answering: the runner records them in a separate
ledger so they never enter a question's cost.
"""

from __future__ import annotations

from ..core.ledger import count_event
from ..llm.metered import MeteredLLM
from .datasets import LONGMEMEVAL_DATASETS
from .longmemeval_judge import DATED_PROMPT_VERSION as LONGMEMEVAL_DATED_PROMPT_VERSION
from .longmemeval_judge import PROMPT_VERSION as LONGMEMEVAL_PROMPT_VERSION
from .longmemeval_judge import judge_prompt as longmemeval_prompt
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


PROTOCOLS = ("memorycpt", "longmemeval")


class Judge:
    """Returns True (CORRECT), False (WRONG) or None (unparseable: counted as ``judge_error``).

    ``protocol``: ``memorycpt`` (one generous prompt, MemoryCPT App. B; LoCoMo and the others) or
    ``longmemeval`` (the benchmark's per-question-type rules, :mod:`.longmemeval_judge`; the call
    then names the question's type, whether it is an abstention question and the date it was asked).
    """

    def __init__(self, llm: MeteredLLM, protocol: str = "memorycpt"):
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown judge protocol {protocol!r}; choose one of {PROTOCOLS}")
        self.llm = llm
        self.protocol = protocol

    async def __call__(
        self,
        question: str,
        gold: str,
        generated: str,
        *,
        question_type: str | None = None,
        abstention: bool = False,
        question_date: str | None = None,
    ) -> bool | None:
        if self.protocol == "longmemeval":
            prompt = longmemeval_prompt(
                question_type or "", question, gold, generated, abstention=abstention, question_date=question_date
            )
        else:
            prompt = JUDGE_TEMPLATE.format(question=question, gold=gold, generated=generated)
        out = await self.llm.complete(
            [{"role": "user", "content": prompt}],
            role="judge",
            max_tokens=16,
            temperature=0.0,
            json_schema=LABEL_SCHEMA,
        )
        label = parse_judge_label(out.text)
        if label is None:
            count_event("judge_error")
            return None
        return label == "CORRECT"


def judge_prompt_version(dataset: str, dated: bool = False) -> str:
    """The judge prompt version of a question of ``dataset`` (recorded in provenance): LongMemEval's
    dated prompt when the question carries the date it was asked (``dated``); the MemoryCPT judge
    is never given a date."""
    if dataset not in LONGMEMEVAL_DATASETS:
        return PROMPT_VERSION
    return LONGMEMEVAL_DATED_PROMPT_VERSION if dated else LONGMEMEVAL_PROMPT_VERSION


def make_judge(mem, judge_llm: str | None = None, base_url: str | None = None, *, dataset: str = "") -> Judge:
    """A :class:`Judge` on ``judge_llm`` (an LLM spec) or, by default, ``mem``'s answer model,
    made by :meth:`~memfrontier.strategies.base.MemoryEnv.model`: priced by the run's price book,
    ``price_as`` and ``allow_unpriced``. ``dataset="longmemeval"`` (or ``longmemeval_s``) selects that benchmark's protocol."""
    return Judge(
        mem.env.model(judge_llm, "judge", base_url=base_url),
        protocol="longmemeval" if dataset in LONGMEMEVAL_DATASETS else "memorycpt",
    )
