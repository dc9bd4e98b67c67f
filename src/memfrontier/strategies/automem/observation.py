"""What a tool returns (:class:`Observation`) and the running trace of (action, observation, judge
verdict) steps (AutoMEM, arXiv 2606.04315, Algorithm 1: ``trace <- trace || (a_k, o_k)``)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Observation(BaseModel):
    """One tool result.

    ``ok`` is False for an error the planner must see (bad regex, rejected Cypher, unknown id...);
    ``error`` then names its kind (``bad_args``, ``bad_pattern``, ``timeout``, ``rejected``,
    ``error``, ``not_found``, ``no_index``, ``too_large``, ``parse_error``, ``bad_action``,
    ``unknown_tool``). ``events`` are the ledger events the tool run produced (the toolbox counts
    them as ``automem.<tool>.<event>``). ``record_ids`` are the in-scope records the observation
    shows or cites (the answer's evidence). ``text`` is already capped by the tool's limits;
    ``truncated`` says a cap cut something.
    """

    tool: str
    ok: bool = True
    text: str
    record_ids: list[str] = Field(default_factory=list)
    error: str | None = None
    events: list[str] = Field(default_factory=list)
    truncated: bool = False

    @classmethod
    def failure(cls, tool: str, error: str, text: str, *, events: list[str] | None = None) -> "Observation":
        """An error observation whose event is ``error`` itself unless ``events`` says otherwise."""
        return cls(
            tool=tool, ok=False, text=f"error: {text}", error=error, events=[error] if events is None else events
        )


class Verdict(BaseModel):
    """The judge's reply: is the trace sufficient, and if not, what is missing (the next hint).
    ``parsed`` is False when the reply did not parse (then ``sufficient`` is False)."""

    sufficient: bool = False
    missing: str = ""
    parsed: bool = True


class TraceStep(BaseModel):
    """One step of the loop: the action (as the planner gave it, normalised), its observation and,
    in the loop variant, the judge's verdict on the trace after it."""

    index: int
    action: dict
    observation: Observation
    verdict: Verdict | None = None


def action_label(action: dict) -> str:
    """A one-line description of an action: ``rg ["Canada"]``, ``read [id1, id2]``..."""
    tool = action.get("tool", "?")
    if tool == "rg":
        return f"rg {action.get('patterns', [])}" + ("" if action.get("ignore_case", True) else " (case-sensitive)")
    if tool in ("read", "dump"):
        ids = action.get("ids") or []
        return f"{tool} {ids}" if ids or tool == "read" else "dump (whole history)"
    if tool == "index_query":
        return f"index_query {action.get('cypher', '')!r}"
    return str(tool)


def render_trace(steps: list[TraceStep], *, max_obs_chars: int | None = None, verdicts: bool = True) -> str:
    """The trace as text: per step ``[k] <action>`` then the observation (cut to ``max_obs_chars``)
    and, when ``verdicts``, the judge's verdict."""
    out = []
    for s in steps:
        obs = s.observation.text
        if max_obs_chars is not None and len(obs) > max_obs_chars:
            obs = obs[:max_obs_chars] + " ..."
        out.append(f"[{s.index}] {action_label(s.action)}\n{obs}")
        if verdicts and s.verdict is not None:
            v = s.verdict
            out.append(
                f"[{s.index}] judge: "
                + ("sufficient" if v.sufficient else f"insufficient; missing: {v.missing or '?'}")
            )
    return "\n".join(out)
