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
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


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
