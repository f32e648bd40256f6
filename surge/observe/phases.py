"""Per-compile time breakdown by phase.

Layers wrap their work in ``with phase_timer.phase("lowering"):``; the frontend
wraps each compile of a frame in ``with phase_timer.compile(name):``. Phases nest
(capture calls the backend, which lowers and generates code), so each phase is
charged its *self* time: time spent in a nested phase is charged to the nested
phase only, and the phases of one compile add up to its wall time. Work outside
any phase but inside a compile is charged to "other".

Finished compiles are kept in ``phase_timer.records`` (for ``explain`` and the
bench) and printed under ``SURGE_LOGS=perf``. A phase entered outside any open
compile starts an implicit one, so a backend called directly (through
``torch.compile(backend=...)``) is measured too.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
import time

from .. import logs

PHASES = (
    "capture",         # bytecode -> torch-level FX graph + guards
    "aot",             # ATen tracing, functionalization, joint graph, partition
    "passes",          # DCE, CSE, constant folding, rewrites
    "lowering",        # ATen -> loop IR
    "scheduling",      # fusion, ordering, memory plan
    "codegen",         # kernel and wrapper source
    "kernel_compile",  # Triton / C++ compilation and loading
    "autotune",        # benchmarking kernel configurations
    "other",           # inside a compile but in no named phase
)

# The longest a compile record list may grow; old records are dropped first so a
# long-running program that recompiles often does not leak.
MAX_RECORDS = 1000


@dataclasses.dataclass
class CompileRecord:
    """The breakdown of one compile: seconds of self time per phase."""

    name: str
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    total: float = 0.0
    current_phase: str | None = None
    # The SURGE_DEBUG_DIR folder of this compile, named on its first artifact.
    debug_folder: str | None = None

    def format(self) -> str:
        parts = [f"{p}={s * 1e3:.1f}ms" for p, s in self.seconds.items() if s > 0]
        return f"{self.name}: total {self.total * 1e3:.1f}ms ({', '.join(parts) or 'no phases'})"

    def as_dict(self) -> dict:
        return {"name": self.name, "total_s": self.total, "phases_s": dict(self.seconds)}


class _Frame:
    """One open phase on the stack: when it began and how much nested time it holds."""

    __slots__ = ("name", "start", "nested")

    def __init__(self, name: str, start: float):
        self.name = name
        self.start = start
        self.nested = 0.0


class PhaseTimer:
    def __init__(self):
        self.records: list[CompileRecord] = []
        self._local = threading.local()
        self._lock = threading.Lock()

    # The per-thread state: the open compile record and its stack of open phases.
    def _state(self):
        local = self._local
        if not hasattr(local, "stack"):
            local.stack = []
            local.record = None
        return local

    def current_record(self) -> CompileRecord | None:
        """The compile open on this thread, if any."""
        return self._state().record

    @contextlib.contextmanager
    def compile(self, name: str, progress: bool | None = None):
        """Open a compile record; nested compiles are folded into the outer one.

        ``progress``: ``Options.progress`` of the compile; None (a backend called alone,
        which has no options yet): as the environment sets it."""
        state = self._state()
        if state.record is not None:
            yield state.record
            return
        from .progress import CompileProgress

        record = CompileRecord(name)
        state.record = record
        start = time.perf_counter()
        if progress is None:
            from ..options import Options
            progress = Options.from_env().progress
        progress = CompileProgress.start(record, enabled=progress)
        try:
            with self.phase("other"):
                yield record
        finally:
            progress.stop()
            record.total = time.perf_counter() - start
            # Starting and stopping the progress line lie outside the "other" phase;
            # charge them to it so that the phases add up to the total exactly.
            record.seconds["other"] += record.total - sum(record.seconds.values())
            state.record = None
            self._finish(record)

    @contextlib.contextmanager
    def phase(self, name: str):
        if name not in PHASES:
            raise ValueError(f"unknown compile phase {name!r}; known phases: {PHASES}")
        state = self._state()
        if state.record is None:
            # A phase with no compile around it (a backend called directly).
            with self.compile(f"compile_{name}"):
                with self.phase(name):
                    yield
            return
        record = state.record
        frame = _Frame(name, time.perf_counter())
        outer_phase = record.current_phase
        state.stack.append(frame)
        record.current_phase = name
        try:
            yield
        finally:
            state.stack.pop()
            record.current_phase = outer_phase
            elapsed = time.perf_counter() - frame.start
            record.seconds[name] = record.seconds.get(name, 0.0) + elapsed - frame.nested
            if state.stack:
                state.stack[-1].nested += elapsed

    def _finish(self, record: CompileRecord) -> None:
        with self._lock:
            self.records.append(record)
            del self.records[:-MAX_RECORDS]
        logs.log("perf", "compile " + record.format())

    def reset(self) -> None:
        with self._lock:
            self.records.clear()

    def summary(self, records: list[CompileRecord] | None = None) -> dict[str, float]:
        """Seconds per phase summed over ``records`` (default: all kept records)."""
        totals: dict[str, float] = {}
        for record in self.records if records is None else records:
            for name, seconds in record.seconds.items():
                totals[name] = totals.get(name, 0.0) + seconds
        return {name: totals[name] for name in PHASES if name in totals}


phase_timer = PhaseTimer()


def format_breakdown(seconds: dict[str, float]) -> str:
    """One line, phases in pipeline order, e.g. ``capture 12.0ms, aot 30.1ms``."""
    parts = [f"{name} {seconds[name] * 1e3:.1f}ms" for name in PHASES if seconds.get(name, 0) > 0]
    return ", ".join(parts) if parts else "(no phases recorded)"
