"""``dump``: send a short corpus to the answer model and return its answer with cited evidence
(AutoMEM, arXiv 2606.04315, Sec. 5; the only tool with a model inside, role ``dump``).

The corpus is the records ``ids`` of the scope, or the whole history when no ids are given and it
fits ``min(dump_max_tokens, context window - answer tokens - 256)`` tokens of the answer model;
otherwise the observation is a ``too_large`` error telling the planner to dump a record set. The
reply is JSON ``{"answer", "evidence"}``; cited ids that are not in the dumped set are dropped
(and counted as ``bad_citation``). A reply that does not parse is a ``parse_error`` observation.
A call whose worst case could cross the question's hard budget is not made: the observation is
an ``over_budget`` error (and ``budget.call_refused.dump`` is counted).
"""

from __future__ import annotations

from ....core.ledger import BudgetExceededError, count_event
from ....core.types import Budget
from ....llm.metered import MeteredLLM
from ....llm.parsing import parse_or_count
from ..corpus import ScopedCorpus
from ..observation import Observation
from ..prompts import DUMP_SCHEMA, dump_messages
from .limits import ToolLimits

PROMPT_RESERVE_TOKENS = 256


async def dump(
    corpus: ScopedCorpus,
    ids: list[str],
    question: str,
    llm: MeteredLLM,
    limits: ToolLimits | None = None,
    cost_budget: Budget | None = None,
) -> Observation:
    """One ``dump`` call over ``ids`` (or the whole history) for ``question``, held to ``cost_budget``."""
    lim = limits or ToolLimits()
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return Observation.failure("dump", "bad_args", "'ids' must be a list of record ids (empty: whole history)")
    budget = min(lim.dump_max_tokens, llm.context_tokens - lim.dump_answer_tokens - PROMPT_RESERVE_TOKENS)
    events: list[str] = []
    if ids:
        records, missing = [], []
        for rid in dict.fromkeys(i.strip() for i in ids if i.strip()):
            r = corpus.resolve(rid)
            if r is None:
                missing.append(rid)
                events.append("out_of_scope" if corpus.in_other_scope(rid) else "not_found")
            elif r not in records:
                records.append(r)
        if not records:
            return Observation.failure(
                "dump", "not_found", f"no record with id {', '.join(map(repr, missing))} in this memory", events=events
            )
        text = "\n".join(corpus.line(r) for r in records)
        n = llm.count_tokens(text)
    else:
        records = corpus.records
        if not records:
            return Observation.failure("dump", "not_found", "the memory is empty")
        n = corpus.tokens(llm)
        text = None
    if n > budget:
        what = "the whole history" if not ids else f"these {len(records)} records"
        return Observation.failure(
            "dump",
            "too_large",
            f"{what} is {n} tokens, over the dump budget of {budget}; "
            "use rg or index_query first, then dump a few record ids",
        )
    if text is None:
        text = "\n".join(corpus.line(r) for r in records)
    try:
        out = await llm.complete(
            dump_messages(text, question),
            role="dump",
            max_tokens=lim.dump_answer_tokens,
            temperature=0.0,
            json_schema=DUMP_SCHEMA,
            budget=cost_budget,
        )
    except BudgetExceededError as e:
        return Observation.failure("dump", "over_budget", f"dump not run: {e}; answer from what you have")
    res = parse_or_count(out.text, "parse_error.dump", expect="object")
    if not res.ok or not isinstance(res.value.get("answer"), str):
        return Observation.failure(
            "dump",
            "parse_error",
            f"the dump reply was not the expected JSON: {out.text[:120]!r}",
            events=events + ["parse_error"],
        )
    allowed = {r.id for r in records}
    cited, bad = [], 0
    for c in res.value.get("evidence") or []:
        r = corpus.resolve(str(c))
        if r is not None and r.id in allowed and r.id not in cited:
            cited.append(r.id)
        else:
            bad += 1
    if bad:
        events.append("bad_citation")
        if bad > 1:
            count_event("automem.dump.bad_citation", bad - 1)  # the toolbox counts one per event
    answer = res.value["answer"].strip() or "(empty)"
    lines = [
        f"dump answer over {len(records)} records: {answer}",
        f"evidence: {', '.join(cited) if cited else '(none cited)'}",
    ]
    return Observation(tool="dump", text="\n".join(lines), record_ids=cited, events=events)
