"""Progress display of the long commands: the question bar and a conversation's ingest/construction row."""

from __future__ import annotations

import time

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..core.words import plural
from .app import (
    err,
)

#: Off a terminal, a task's progress line is printed at most this often (seconds), and when it ends.
LOG_EVERY_S = 60.0


class _LoggedProgress(Progress):
    """A :class:`~rich.progress.Progress` that, where stderr is not a terminal (a log file, a
    pipe), draws no bar but prints a plain line for a task whose count moved: at most once every
    :data:`LOG_EVERY_S` seconds, and when it reaches its total (``112/160 answering · mean F1
    0.301 · 4:05 elapsed, ~9:30 left``). The time left is this run's pace since the task's count
    last started over (a resumed run's earlier answers do not count as speed). On a terminal it
    is the usual bar."""

    def __init__(self, *columns, **kwargs):
        super().__init__(*columns, **kwargs)
        self._paces: dict[TaskID, _Pace] = {}

    def update(self, task_id: TaskID, **kwargs) -> None:
        super().update(task_id, **kwargs)
        self._log(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._log(task_id)

    def _log(self, task_id: TaskID) -> None:
        if not self.disable:
            return
        task = next((t for t in self.tasks if t.id == task_id), None)  # rich's public, locked copy
        if task is None or task.total is None:
            return
        line = self._paces.setdefault(task_id, _Pace()).line(time.monotonic(), task.completed, task.total)
        if line:
            self.console.print(f"{line[0]} {task.description} · {line[1]}", markup=False, highlight=False)


class _Pace:
    """When a task's log line is due, and the time it has left, from counts seen over time."""

    def __init__(self):
        self.start: tuple[float, float] | None = None  # (time, count) where the count last started over
        self.total = 0.0
        self.last = (0.0, 0.0)  # (time, count) of the last line

    def line(self, now: float, done: float, total: float) -> tuple[str, str] | None:
        """``("112/160", "4:05 elapsed, ~9:30 left")`` when a line is due, else None."""
        if self.start is None or total != self.total or done < self.last[1]:
            self.start, self.total, self.last = (now, done), total, (now, done)
            return None
        ended = done >= total
        if done == self.last[1] or not (ended or now - self.last[0] >= LOG_EVERY_S):
            return None
        self.last = (now, done)
        elapsed = now - self.start[0]
        timing = f"{_duration(elapsed)} elapsed"
        if not ended:
            left = (total - done) * elapsed / (done - self.start[1])
            timing += f", ~{_duration(left)} left"
        return f"{done:.0f}/{total:.0f}", timing


def _duration(seconds: float) -> str:
    """``"4:05"``, or ``"1:02:03"`` from an hour on."""
    minutes, s = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{s:02d}" if minutes >= 60 else f"{minutes}:{s:02d}"


def _question_bar():
    """The progress bar of every long command, on stderr. On a terminal it is drawn; on a log or
    a pipe it prints a plain progress line now and then (:class:`_LoggedProgress`), so an
    hours-long run written to a file shows that it moves and how far it has to go."""
    return _LoggedProgress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=False,
        disable=not err.is_terminal,
    )


class IngestRow:
    """A conversation's ingest as its own row of a progress ``bar``: turns embedded out of the
    turns to embed (:func:`memfrontier.eval.tasks.construct`'s ``embed`` events, or a store
    ``add``'s ``progress(done, total)``), so a conversation of hundreds of sessions shows it is
    moving; then the steps of its offline construction (``construct`` events: sessions, windows),
    with the model calls made and how many failed or fell back, so an hours-long build shows both
    that it moves and whether it degrades. The row goes once the conversation is done (``ingest``
    event, or :meth:`close`). A conversation whose construction made model calls in this run also
    leaves a line (printed on a log too) with the view's calls and failures (over every run that
    built it, when the view records them)."""

    def __init__(self, bar: Progress, prefix: str = ""):
        self.bar, self.prefix, self.task = bar, prefix, None
        self.building: str | None = None  # the conversation whose construction the row follows
        self.skipped = 0  # its units done before this run's first model call (built by an earlier run)

    def _say(self, text: str) -> None:
        self.bar.console.print(f"{self.prefix}{text}", markup=False, highlight=False)

    def _set(self, desc: str, done: int, total: int) -> None:
        if self.task is None:
            self.task = self.bar.add_task(desc, total=total, completed=done)
        else:
            self.bar.update(self.task, description=desc, total=total, completed=done)

    def show(self, conversation: str, sessions: int, done: int, total: int) -> None:
        self._set(f"{self.prefix}ingesting {conversation} ({plural(sessions, 'session')}): turns embedded", done, total)

    def close(self) -> None:
        if self.task is not None:
            self.bar.remove_task(self.task)
            self.task = None

    def on_event(self, event: str, info: dict) -> None:
        """Follow a run's progress events (others are ignored)."""
        if event == "embed":
            self.show(info["conversation"], info["sessions"], info["done"], info["total"])
        elif event == "build":
            self.close()
        elif event == "construct":
            if self.building != info["conversation"]:
                self.building, self.skipped = info["conversation"], 0
            if not info["calls"]:  # units done without a call so far: built by an earlier run
                self.skipped = info["done"]
            elif self.skipped is not None:  # this run's first call: say where a resumed build went on
                if self.skipped:
                    self._say(
                        f"resuming the build of {info['conversation']}'s memory view: {self.skipped} of "
                        f"{info['total']} {info['unit']} built by an earlier run"
                    )
                self.skipped = None
            failed = f", {info['failed']} failed or fell back" if info["failed"] else ""
            self._set(
                f"{self.prefix}building {info['conversation']}: {info['unit']} "
                f"({plural(info['calls'], 'model call')} this run{failed})",
                info["done"],
                info["total"],
            )
        elif event == "ingest":
            self.close()
            self.building = None
            if info.get("built_calls"):
                self._say(
                    f"built {info['conversation']}'s memory view: {plural(info['built_calls'], 'model call')} this run; "
                    f"{info['calls']} in all, {info['failed']} failed or fell back"
                )
