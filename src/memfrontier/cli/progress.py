"""Progress display of the long commands: the question bar and a conversation's ingest/construction row."""

from __future__ import annotations

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..core.words import plural
from .app import (
    err,
)


def _question_bar():
    """The progress bar of every long command, on stderr; drawn only on a terminal, so logs and
    scripts that read stderr get the commands' own lines and nothing else."""
    return Progress(
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
