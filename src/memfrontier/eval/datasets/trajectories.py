"""Agent-trajectory loader: JSONL, one step per line -> one :class:`Conversation` per run.

Step lines (AutoMEM, arXiv 2606.04315, Sec. 4: agentic-trajectory QA, where index-based memories
lose step- and action-level evidence)::

    {"run_id": "webshop-0001", "step": 3, "action": "scroll[down]", "observation": "...",
     "reward": 0.0, "state": {...}, "task": "...", "timestamp": "2025-03-14T10:03:00",
     "user_id": "...", "agent_id": "..."}

``run_id`` (string), ``step`` (integer >= 0; ``step_index`` is accepted too) and ``action``
(string) are required; ``observation`` defaults to ""; ``reward`` (number), ``state`` (any JSON),
``task`` (string, usually on the first step), ``timestamp`` (ISO-8601), ``user_id`` / ``agent_id``
are optional. Every step becomes a ``Record`` with ``kind="step"``, id ``<run_id>:step<step>``,
``step_index`` / ``action`` / ``observation`` set, speaker ``agent``, session ``<run_id>:episode``
and scope ``(user_id or run_id, agent_id, run_id)``; reward and state go to ``meta``. Steps are
ordered by step index (duplicates are an error); the run's task and total reward go to the
conversation's meta.

Questions (optional, a second JSONL): ``{"id", "run_id", "question", "answer", "category",
"evidence_steps": [int]}``; evidence steps become record ids. Any malformed line raises
:class:`~memfrontier.eval.datasets.DatasetError` naming ``file:line``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...core.jsonio import read_jsonl_objects
from ...core.timeutil import canonical_timestamp
from ...core.types import Conversation, Question, Record, Scope
from . import DatasetError


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    if not path.is_file():
        raise DatasetError(f"trajectory file not found: {path}")
    return read_jsonl_objects(path, DatasetError)


def _req(obj: dict, key: str, typ, where: str):
    v = obj.get(key)
    if not isinstance(v, typ) or isinstance(v, bool) or (isinstance(v, str) and not v.strip()):
        raise DatasetError(f"{where}: '{key}' must be a non-empty {typ.__name__}, got {v!r}")
    return v


def step_record(obj: dict, where: str) -> Record:
    """One step line -> its Record (see the module doc). Raises DatasetError."""
    run_id = _req(obj, "run_id", str, where)
    step = obj.get("step", obj.get("step_index"))
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise DatasetError(f"{where}: 'step' must be an integer >= 0, got {step!r}")
    action = _req(obj, "action", str, where)
    observation = obj.get("observation", "")
    if not isinstance(observation, str):
        raise DatasetError(f"{where}: 'observation' must be a string")
    reward = obj.get("reward")
    if reward is not None and (not isinstance(reward, (int, float)) or isinstance(reward, bool)):
        raise DatasetError(f"{where}: 'reward' must be a number")
    meta = {k: obj[k] for k in ("reward", "state", "task") if k in obj}
    try:
        timestamp = canonical_timestamp(obj.get("timestamp"))
    except ValueError as e:
        raise DatasetError(f"{where}: {e}") from None
    scope = Scope(user_id=obj.get("user_id") or run_id, agent_id=obj.get("agent_id"), run_id=run_id)
    return Record(
        id=f"{run_id}:step{step}",
        kind="step",
        scope=scope,
        session_id=f"{run_id}:episode",
        speaker="agent",
        role="assistant",
        timestamp=timestamp,
        text="",
        step_index=step,
        action=action,
        observation=observation,
        meta=meta,
    )


def load_trajectories(path: str | os.PathLike, questions: str | os.PathLike | None = None) -> list[Conversation]:
    """Runs of the step file ``path`` (and questions from ``questions``), in first-seen run order."""
    p = Path(path)
    runs: dict[str, list[Record]] = {}
    for n, obj in _read_jsonl(p):
        r = step_record(obj, f"{p}:{n}")
        steps = runs.setdefault(r.scope.run_id, [])
        if any(s.step_index == r.step_index for s in steps):
            raise DatasetError(f"{p}:{n}: step {r.step_index} of run {r.scope.run_id!r} appears twice")
        steps.append(r)
    convs = {}
    for run_id, steps in runs.items():
        steps.sort(key=lambda r: r.step_index)
        task = next((s.meta["task"] for s in steps if s.meta.get("task")), None)
        rewards = [s.meta["reward"] for s in steps if "reward" in s.meta]
        convs[run_id] = Conversation(
            id=run_id,
            records=steps,
            questions=[],
            meta={
                "source": str(p),
                "task": task,
                "steps": len(steps),
                "total_reward": sum(rewards) if rewards else None,
            },
        )
    if questions is not None:
        q = Path(questions)
        for n, obj in _read_jsonl(q):
            where = f"{q}:{n}"
            run_id = _req(obj, "run_id", str, where)
            if run_id not in convs:
                raise DatasetError(f"{where}: question for unknown run {run_id!r}")
            ev = obj.get("evidence_steps", [])
            if not isinstance(ev, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in ev):
                raise DatasetError(f"{where}: 'evidence_steps' must be a list of step indices")
            conv = convs[run_id]
            convs[run_id].questions.append(
                Question(
                    id=_req(obj, "id", str, where),
                    conversation_id=run_id,
                    question=_req(obj, "question", str, where),
                    answer=obj.get("answer"),
                    category=str(obj.get("category", "trajectory")),
                    evidence_ids=[f"{run_id}:step{s}" for s in ev if any(r.step_index == s for r in conv.records)],
                )
            )
    return list(convs.values())


__all__ = ["load_trajectories", "step_record"]
