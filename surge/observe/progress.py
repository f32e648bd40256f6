"""Progress of long compiles, shown on an interactive terminal only.

A compile that is still running after ``DELAY_S`` seconds (autotuning, a large
model) prints one status line that it rewrites in place, naming the compile,
its current phase and the elapsed time. When stderr is not a terminal (CI,
pipes, logs) nothing is printed and no thread is started, so the check costs
one ``isatty`` call per compile. ``Options.progress`` (``SURGE_PROGRESS=0``) turns it off.
"""
from __future__ import annotations

import sys
import threading
import time

DELAY_S = 2.0
REFRESH_S = 0.5


def interactive() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class CompileProgress:
    """A status-line ticker for one compile record (see ``phases.PhaseTimer.compile``)."""

    def __init__(self, record, stream):
        self.record = record
        self.stream = stream
        self.start_time = time.perf_counter()
        self.shown = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="surge-progress", daemon=True)

    @classmethod
    def start(cls, record, stream=None, force: bool = False, enabled: bool = True):
        """``enabled``: ``Options.progress``; ``force``: show it on any stream (tests)."""
        if not force and not (enabled and interactive()):
            return _NO_PROGRESS
        progress = cls(record, stream or sys.stderr)
        progress._thread.start()
        return progress

    def line(self) -> str:
        elapsed = time.perf_counter() - self.start_time
        phase = self.record.current_phase or "starting"
        return f"surge: compiling {self.record.name} [{phase}] {elapsed:.1f}s"

    def _run(self) -> None:
        if self._stop.wait(DELAY_S):
            return
        while not self._stop.is_set():
            self.stream.write("\r\033[K" + self.line())
            self.stream.flush()
            self.shown = True
            self._stop.wait(REFRESH_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.shown:
            elapsed = time.perf_counter() - self.start_time
            self.stream.write(f"\r\033[Ksurge: compiled {self.record.name} in {elapsed:.1f}s\n")
            self.stream.flush()


class _NoProgress:
    shown = False

    def stop(self) -> None:
        pass


_NO_PROGRESS = _NoProgress()
