"""Progress on stderr for the harness's long runs (compare, build_only, run_from, bench)."""

from __future__ import annotations

import sys


class Progress:
    """Progress on stderr: a rich progress bar on a terminal, one line per step otherwise,
    nothing when disabled."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._rich = None
        self._task = None

    def __enter__(self):
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._rich = Progress(TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=Console(stderr=True), transient=True)
            self._rich.start()
        return self

    def __exit__(self, *exc):
        if self._rich is not None:
            self._rich.stop()

    def say(self, text: str, *, line: bool = True) -> None:
        """A step: the bar's description on a terminal, else a line (unless ``line`` is False)."""
        if self._rich is not None and self._task is not None:
            self._rich.update(self._task, description=text)
        elif self.enabled and self._rich is None and line:
            print(f"cuvil: {text}", file=sys.stderr, flush=True)

    def phase(self, name: str, total: int) -> None:
        """A new bar (building: one unit per entry; timing: one per timed call asked for)."""
        if self._rich is not None:
            if self._task is not None:
                self._rich.update(self._task, completed=self._rich.tasks[self._task].total)
            self._task = self._rich.add_task(name, total=total)

    def advance(self) -> None:
        if self._rich is not None and self._task is not None:
            self._rich.advance(self._task)
