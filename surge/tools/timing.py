"""Measurement primitives of the bench: timing, device sync, copy bandwidth, peak memory."""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Callable

import torch


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def median_time(step: Callable[[], object], device: str, *, warmup: int = 3, min_reps: int = 5,
                max_reps: int = 200, budget_s: float = 1.0) -> float:
    """Median seconds of ``step()``, after ``warmup`` calls, each call timed alone.

    On CUDA each call is bracketed by events and the device synchronized, so the
    time is the device's; on CPU it is the wall time of the call. The number of
    repetitions grows until ``budget_s`` is spent (between ``min_reps`` and ``max_reps``).
    """
    for _ in range(warmup):
        step()
    synchronize(device)
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    cuda = device.startswith("cuda")
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() < deadline):
        times.append(_timed_call(step, cuda))
    return statistics.median(times)


def _timed_call(step: Callable[[], object], cuda: bool) -> float:
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def interleaved_times(steps: dict[str, Callable[[], object]], device: str, *, warmup: int = 3,
                      min_reps: int = 5, max_reps: int = 200, budget_s: float = 1.0,
                      timer: Callable[[Callable[[], object]], float] | None = None) -> dict[str, list[float]]:
    """Seconds of each call of each step, timed in rounds that call every step once.

    Calls alternate between the contenders (the first of a round rotates), so a
    clock, thermal or background-load drift during the measurement weighs on all of
    them alike instead of on whoever ran last. Each call is timed alone, as in
    ``median_time`` (``timer`` replaces that timing, for tests); the rounds go on
    until ``budget_s`` per step is spent. Entry ``k`` of every list is from round ``k``."""
    names = list(steps)
    for name in names:
        for _ in range(warmup):
            steps[name]()
    synchronize(device)
    cuda = device.startswith("cuda")
    timer = timer or (lambda step: _timed_call(step, cuda))
    times: dict[str, list] = {name: [] for name in names}
    deadline = time.perf_counter() + budget_s * len(names)
    rounds = 0
    while rounds < max_reps and (rounds < min_reps or time.perf_counter() < deadline):
        shift = rounds % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timer(steps[name]))
        rounds += 1
    return times


def interleaved_medians(steps: dict[str, Callable[[], object]], device: str, **kwargs) -> dict[str, float]:
    """Median seconds of each step, from ``interleaved_times``."""
    return {name: statistics.median(t) for name, t in interleaved_times(steps, device, **kwargs).items()}


# Rounds whose speed ratios disagree by more than this (interquartile range over the
# median) were disturbed too much for one ratio to describe them.
MAX_RATIO_SPREAD = 0.5


@dataclasses.dataclass(frozen=True)
class Speedup:
    """How much faster ``candidate`` ran than ``baseline`` over interleaved rounds."""

    baseline_s: float     # median seconds per call
    candidate_s: float
    ratio: float          # baseline_s / candidate_s (above 1: the candidate is faster)
    spread: float         # the per-round ratios' interquartile range over their median
    rounds: int

    @property
    def reliable(self) -> bool:
        return self.spread <= MAX_RATIO_SPREAD


def speedup(baseline: list[float], candidate: list[float]) -> Speedup:
    """The speedup of two steps timed in the same rounds (``interleaved_times``): the ratio
    of their medians, and how much the ratio moved from round to round."""
    if len(baseline) != len(candidate) or not baseline:
        raise ValueError("speedup needs the two steps' times from the same interleaved rounds")
    per_round = [b / c if c > 0 else math.inf for b, c in zip(baseline, candidate)]
    if len(per_round) >= 4:
        q1, median, q3 = statistics.quantiles(per_round, n=4)
    else:
        q1, median, q3 = min(per_round), statistics.median(per_round), max(per_round)
    spread = (q3 - q1) / median if math.isfinite(q3) and median > 0 else math.inf
    base_s, cand_s = statistics.median(baseline), statistics.median(candidate)
    return Speedup(base_s, cand_s, base_s / cand_s if cand_s > 0 else math.inf, spread, len(per_round))


def timed_once(step: Callable[[], object], device: str) -> tuple[float, object]:
    """Wall time of one call including device completion (a first, compiling call)."""
    synchronize(device)
    t0 = time.perf_counter()
    result = step()
    synchronize(device)
    return time.perf_counter() - t0, result


def copy_bandwidth(device: str, nbytes: int) -> float:
    """Bytes per second of a large device-to-device copy (read + write counted)."""
    n = nbytes // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    seconds = median_time(lambda: dst.copy_(src), device, warmup=2, min_reps=5, max_reps=50, budget_s=0.5)
    return 2 * n * 4 / seconds


def peak_memory(step: Callable[[], object], device: str) -> int | None:
    """Peak bytes allocated during one call above what was allocated before it (CUDA only).

    On CPU torch has no allocator statistics; the bench reports n/a there rather
    than a process RSS figure, which is dominated by the allocator's caching.
    """
    if not device.startswith("cuda"):
        return None
    synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = step()
    synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del result
    return peak
