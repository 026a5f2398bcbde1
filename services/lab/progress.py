"""The lab's progress display: one rich progress bar per experiment, on stderr so the
tables on stdout stay clean when redirected."""

from __future__ import annotations

import shutil
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)


def table_console() -> Console:
    """stdout, at most 100 columns wide (also when piped, where rich would assume 80)."""
    return Console(width=min(100, shutil.get_terminal_size((100, 24)).columns))


class RichTracker:
    def __init__(self) -> None:
        self.console = table_console()
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24),
            MofNCompleteColumn(), TimeElapsedColumn(),
            console=Console(stderr=True), transient=True,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> RichTracker:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()

    def start(self, label: str, total: int) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(label, total=total)

    def advance(self) -> None:
        if self._task is not None:
            self._progress.advance(self._task)
