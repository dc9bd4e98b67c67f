"""The answerer f_ans(q, m_q): a frozen model with a pinned prompt (MemoryCPT App. B QA prompt).

It also enforces the caller's :class:`~memfrontier.core.types.Budget` on the one call it makes:
the context's tail is dropped (strategies put their most relevant material first) until the
call's predicted tokens, USD and proxy seconds fit; the cut is counted in the ledger as
``budget.context_truncated``.
"""

from __future__ import annotations

from .core.fit import cut_to_tokens
from .core.ledger import BudgetExceededError, count_event, current_ledger
from .core.render import asked_on
from .core.text import clean_text
from .core.types import Budget, Context
from .llm.metered import MeteredLLM

__all__ = ["Answerer", "BudgetExceededError", "prompt_version"]

PROMPT_VERSION = "qa-memorycpt-v1"
#: The prompt of a question asked at a known time (LongMemEval's reader is told the current date).
DATED_PROMPT_VERSION = "qa-memorycpt-v1+date-v1"
MAX_ANSWER_TOKENS = 32

# MemoryCPT, Appendix B "Final QA Model Setup" (answer in <= 6 words).
QA_TEMPLATE = (
    "You are a QA assistant. Use ONLY the context below to answer the question.\n"
    "If the context lacks the info, answer with your best guess from it.\n"
    "Answer in <=6 words, no explanation.\n"
    "Context: {ctx}\n\n"
    "Question: {question}\n\n"
    "Answer:"
)

# The same, for a question asked at a known time: the date it is asked (as LongMemEval's reader
# prompt gives it), and which of two dated statements of one thing is current.
QA_DATED_TEMPLATE = (
    "You are a QA assistant. Use ONLY the context below to answer the question.\n"
    "If the context lacks the info, answer with your best guess from it.\n"
    "Statements are dated; when two disagree, the later one is current.\n"
    "Answer in <=6 words, no explanation.\n"
    "Context: {ctx}\n\n"
    "Today is {today}.\n"
    "Question: {question}\n\n"
    "Answer:"
)


def prompt_version(question_date: str | None) -> str:
    """The answer prompt's version for a question asked at ``question_date`` (None: undated)."""
    return PROMPT_VERSION if question_date is None else DATED_PROMPT_VERSION


def _clean(text: str) -> str:
    """The first non-empty line of the reply, without surrounding quotes/labels."""
    for line in text.strip().splitlines():
        line = line.strip().strip('"').strip()
        if line.lower().startswith("answer:"):
            line = line[7:].strip()
        if line:
            return line
    return ""


class Answerer:
    """Answers ``question`` from a context with one call (role ``answerer``)."""

    prompt_version = PROMPT_VERSION

    def __init__(self, llm: MeteredLLM, max_answer_tokens: int = MAX_ANSWER_TOKENS):
        self.llm = llm
        self.max_answer_tokens = max_answer_tokens

    def prompt(self, question: str, context: str, question_date: str | None = None) -> str:
        """The answer prompt: :data:`QA_TEMPLATE`, or :data:`QA_DATED_TEMPLATE` (the day it is asked,
        ``"Tuesday, 30 May 2023"``) when ``question_date`` (an ISO timestamp) is given."""
        if question_date is None:
            return QA_TEMPLATE.format(ctx=context, question=question)
        return QA_DATED_TEMPLATE.format(ctx=context, question=question, today=asked_on(question_date))

    def max_input_tokens(self, budget: Budget) -> int | None:
        """The largest prompt (tokens) whose call, with the output at its cap of
        ``max_answer_tokens``, fits what the strategy left of ``budget`` (the current ledger's
        :meth:`~memfrontier.core.ledger.Ledger.remaining`, calls in flight included) by the answer
        model's price and latency profile (:meth:`~memfrontier.llm.metered.MeteredLLM.max_prompt_tokens`);
        None = no cap."""
        ledger = current_ledger()
        left = ledger.remaining(budget) if ledger is not None else budget
        return self.llm.max_prompt_tokens(left, self.max_answer_tokens)

    def prompt_tokens(self, question: str, context: str, question_date: str | None = None) -> int:
        """The answer call's prompt, in tokens, as the hard budget predicts it before the call
        (:meth:`~memfrontier.llm.metered.MeteredLLM.prompt_tokens`: the rendered prompt and its
        message template)."""
        return self.llm.prompt_tokens([{"role": "user", "content": self.prompt(question, context, question_date)}])[0]

    def _refusal(self, needed: int, budget: Budget) -> str:
        """Why the question alone cannot be asked within ``budget``: the cap that binds, and the room it leaves."""
        ledger = current_ledger()
        left = ledger.remaining(budget) if ledger is not None else budget
        rooms = {
            cap: self.llm.max_prompt_tokens(Budget(**{cap: value}), self.max_answer_tokens)
            for cap, value in left.model_dump().items()
            if value is not None
        }
        rooms = {cap: room for cap, room in rooms.items() if room is not None and room < needed}
        if not rooms:
            return f"the question alone needs {needed} prompt tokens, more than the model's window leaves"
        cap, room = min(rooms.items(), key=lambda kv: kv[1])
        return (
            f"the question alone needs {needed} prompt tokens with {self.max_answer_tokens} reserved for the answer, "
            f"but {cap}={getattr(budget, cap)} (what is left of it: {getattr(left, cap):.6g}) leaves room for "
            f"{max(room, 0)}; raise {cap}"
        )

    def fit(self, question: str, context: Context, budget: Budget, question_date: str | None = None) -> str:
        """The context text cut to fit the model window and the budget (tail dropped, counted):
        whole lines from the top while the call's predicted prompt (:meth:`prompt_tokens`) fits, so
        the call's worst case never crosses a cap. Raises BudgetExceededError (counted
        ``budget.call_refused.answerer``) when not even the question fits."""
        limit = self.llm.context_tokens - self.max_answer_tokens  # prompt_tokens counts the template
        cap = self.max_input_tokens(budget)
        if cap is not None:
            limit = min(limit, cap)
        overhead = self.prompt_tokens(question, "", question_date)
        if overhead > limit:
            count_event("budget.call_refused.answerer")
            raise BudgetExceededError(self._refusal(overhead, budget))
        text, cut = cut_to_tokens(
            context.text,
            limit,
            self.llm.count_tokens,
            whole=lambda ctx: self.prompt_tokens(question, ctx, question_date),
            overhead=overhead,
        )
        if cut:
            count_event("budget.context_truncated")
        return text

    async def answer(
        self, question: str, context: Context, budget: Budget | None = None, question_date: str | None = None
    ) -> str:
        """The answer to ``question`` from ``context`` (one call), within ``budget``; ``question_date``
        (an ISO timestamp, None: undated) is the day the question is asked, given in the prompt."""
        question = clean_text(question)  # lone surrogates -> U+FFFD (the tokenizer cannot encode them)
        text = self.fit(question, context, budget or Budget(), question_date)
        out = await self.llm.complete(
            [{"role": "user", "content": self.prompt(question, text, question_date)}],
            role="answerer",
            budget=budget,  # the last check: the call's worst case, as fit predicted it
            max_tokens=self.max_answer_tokens,
            temperature=0.0,
            single_line=True,
        )
        answer = _clean(out.text)
        if not answer:
            count_event("empty_output.answerer")
        return answer
