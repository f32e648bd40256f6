"""Measurement primitives of the bench: timing, device sync, copy bandwidth, peak memory."""
from __future__ import annotations

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


def interleaved_medians(steps: dict[str, Callable[[], object]], device: str, *, warmup: int = 3,
                        min_reps: int = 5, max_reps: int = 200, budget_s: float = 1.0) -> dict[str, float]:
    """Median seconds of each step, timed in rounds that call every step once.

    Calls alternate between the contenders (the first of a round rotates), so a
    clock, thermal or background-load drift during the measurement weighs on all of
    them alike instead of on whoever ran last. Each call is timed alone, as in
    ``median_time``; the rounds go on until ``budget_s`` per step is spent."""
    names = list(steps)
    for name in names:
        for _ in range(warmup):
            steps[name]()
    synchronize(device)
    times: dict[str, list] = {name: [] for name in names}
    deadline = time.perf_counter() + budget_s * len(names)
    cuda = device.startswith("cuda")
    rounds = 0
    while rounds < max_reps and (rounds < min_reps or time.perf_counter() < deadline):
        shift = rounds % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(_timed_call(steps[name], cuda))
        rounds += 1
    return {name: statistics.median(t) for name, t in times.items()}


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
