"""Block sizes, warps and stages: a few candidates per kernel, timed once, cached on disk.

Candidates depend on the kernel's kind, sizes and cost; the first is a heuristic
default (``pointwise_default``, ``persistent_default``). Each candidate is one
more binary to compile, which dominates a cold compile, so by default a kernel
runs with a tuned choice found on disk or else the default. With autotuning on,
the first call of a kernel on a GPU times each candidate on the call's own
arguments (kernels only write their outputs, so running one several times is
harmless), keeps the fastest and stores it in ``<cache_dir>/autotune/<key>.json`` (``cache_store``)
for every later process, keyed by the kernel's body, sizes and device. In the
interpreter the default is used.
"""
from __future__ import annotations

import hashlib
import json

from .. import cache_store
from ..observe.phases import phase_timer


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


# A kernel should have at least this many programs to keep a GPU busy (an H200 has
# 132 SMs): a small tensor gets smaller blocks rather than idle SMs.
MIN_PROGRAMS = 256
# Transcendental ops per element from which a pointwise kernel is compute-bound.
COMPUTE_BOUND_OPS = 8


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pointwise_default(xnumel: int, costly_ops: int = 0) -> dict:
    """1024 elements and 4 warps (8 per thread: whole 16-byte loads for fp32 and bf16), or
    2048 and 8 warps for compute-bound kernels (the tuned winner of a 60-op sin/cos/tanh
    chain on an H200, 10% faster there); halved while the grid would be too small.

    A compute-bound kernel keeps its 8 warps when its block shrinks (fewer elements per
    thread, down to one): Triton writes each element a thread holds as its own copy of
    the code, so a 60-op chain at 8 elements per thread is ~12k lines of PTX and 1.5 s
    of compiling against 0.17 s at one (sm_90, Triton 3.9), and a small tensor's
    transcendental work spreads over 8x the threads instead of one warp per program."""
    costly = costly_ops >= COMPUTE_BOUND_OPS
    xblock = 2048 if costly else 1024
    xblock = min(xblock, next_power_of_2(xnumel))
    while xblock > 256 and _cdiv(xnumel, xblock) < MIN_PROGRAMS:
        xblock //= 2
    warps = min(8, xblock // 32) if costly else xblock // 256
    return dict(XBLOCK=xblock, num_warps=max(1, warps), num_stages=1)


def persistent_default(xnumel: int, rnumel: int) -> dict:
    """Rows of 4096 elements or more: one row per program, 32 elements per thread (4 warps
    at 4096: the tuned winner for LayerNorm+GELU fp32 on an H200, 12% faster than two rows
    on 16 warps; one row is also Inductor's choice there). Shorter rows: 2048-element
    tiles of several rows, ~512 elements per warp (the winners at 1024 columns), fewer rows
    while the grid would be too small."""
    rblock = next_power_of_2(rnumel)
    if rblock >= 4096:
        return dict(XBLOCK=1, RBLOCK=rblock, num_warps=min(16, rblock // 1024), num_stages=1)
    xblock = max(1, min(next_power_of_2(xnumel), 2048 // rblock))
    while xblock > 1 and _cdiv(xnumel, xblock) < MIN_PROGRAMS:
        xblock //= 2
    return dict(XBLOCK=xblock, RBLOCK=rblock, num_warps=min(16, max(4, xblock * rblock // 512)), num_stages=1)


def column_default(xnumel: int, rnumel: int, persistent: bool) -> dict:
    """Column reductions (loads along x): 64 neighbouring columns by 32 rows per step, 4
    warps (each warp reads whole 256-byte row segments); a short column (a split's second
    stage) in one tile of up to 2048 elements, at least 32 columns wide."""
    if not persistent:
        return dict(XBLOCK=min(64, next_power_of_2(xnumel)), RBLOCK=min(32, next_power_of_2(rnumel)),
                    num_warps=4, num_stages=1)
    rblock = next_power_of_2(rnumel)
    xblock = min(next_power_of_2(xnumel), max(32, 2048 // rblock))
    while xblock > 32 and _cdiv(xnumel, xblock) < MIN_PROGRAMS:
        xblock //= 2
    return dict(XBLOCK=xblock, RBLOCK=rblock, num_warps=4, num_stages=1)


def at_hints(meta: dict) -> dict:
    """A kernel's metadata with numbers for its sizes: a symbolic kernel's at the example
    inputs (``size_hints``: its size arguments, then xnumel and rnumel), for compiling it
    ahead of a launch; a static kernel's as it is."""
    if not meta.get("symbolic"):
        return meta
    hints = meta["size_hints"]
    numels = hints[-2:] if meta["reduction"] else hints[-1:] + [1]
    return dict(meta, xnumel=numels[0], rnumel=numels[1])


def candidate_configs(meta: dict, interpret: bool) -> list:
    """The default first, then the alternatives autotuning times."""
    xnumel, rnumel = meta["xnumel"], meta["rnumel"]
    xcap = next_power_of_2(xnumel)
    if not meta["reduction"]:
        if interpret:
            return [dict(XBLOCK=min(xcap, 128), num_warps=1, num_stages=1)]
        # each candidate is one more binary to compile on a cold cache: keep few
        out = [pointwise_default(xnumel, meta.get("costly_ops", 0))]
        for x, w in ((1024, 4), (2048, 8)):
            out.append(dict(XBLOCK=min(x, xcap), num_warps=w if x <= xcap else max(1, min(w, xcap // 128)),
                            num_stages=1))
        return _unique(out)
    if meta.get("column") and not interpret:
        out = [column_default(xnumel, rnumel, meta["persistent"])]
        if not meta["persistent"]:
            for x, r, w in ((128, 16, 4), (32, 64, 4), (64, 64, 8)):
                out.append(dict(XBLOCK=min(x, xcap), RBLOCK=min(r, next_power_of_2(rnumel)), num_warps=w,
                                num_stages=1))
        return _unique(out)
    if meta["persistent"]:
        rblock = next_power_of_2(rnumel)
        if interpret:
            return [dict(XBLOCK=min(xcap, max(1, 64 // rblock)), RBLOCK=rblock, num_warps=1, num_stages=1)]
        out = [persistent_default(xnumel, rnumel)]
        for elems, warps in ((4096, 8), (4096, 4), (8192, 16)):
            out.append(dict(XBLOCK=min(xcap, max(1, elems // rblock)), RBLOCK=rblock, num_warps=warps,
                            num_stages=1))
        return _unique(out)
    if interpret:
        return [dict(XBLOCK=1, RBLOCK=min(8, next_power_of_2(rnumel)), num_warps=1, num_stages=1)]
    return _unique([dict(XBLOCK=1, RBLOCK=2048, num_warps=8, num_stages=1),
                    dict(XBLOCK=1, RBLOCK=4096, num_warps=16, num_stages=1),
                    dict(XBLOCK=2, RBLOCK=1024, num_warps=8, num_stages=1)])


def launch_config(meta: dict, cache_dir: str, device_name: str) -> dict:
    """The config a kernel's first launch picks when not autotuning: a stored tuned choice
    for this kernel body, sizes and device, else the default (as the launcher decides)."""
    configs = candidate_configs(meta, interpret=False)
    if len(configs) > 1:
        found = load_choice(cache_dir, tuning_key("", meta, device_name))
        if found is not None:
            return found["config"]
    return configs[0]


def _unique(configs):
    seen, out = set(), []
    for c in configs:
        key = tuple(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def tuning_key(source: str, meta: dict, device_name: str) -> str:
    """Kernel body (its file's hash; else the module ``source``), sizes and device: call
    sites of one kernel with the same sizes share a tuned choice."""
    text = f"{meta.get('file') or source}|{meta['xnumel']}|{meta['rnumel']}|{device_name}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def load_choice(cache_dir: str, key: str):
    """The stored choice for ``key``, or None (none, or a damaged record: tuned again)."""
    data = cache_store.store(cache_dir, "autotune").read_bytes(f"{key}.json")
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


def store_choice(cache_dir: str, key: str, config: dict, timings: list) -> None:
    cache_store.store(cache_dir, "autotune").write_bytes(
        f"{key}.json", json.dumps({"config": config, "timings_ms": timings}).encode())


@phase_timer.phase("autotune")
def benchmark(run, configs: list) -> tuple:
    """The fastest config by median time of ``run(config)``, and all the timings."""
    from triton.testing import do_bench
    timings = []
    for c in configs:
        try:
            ms = do_bench(lambda c=c: run(c), warmup=5, rep=20, return_mode="median")
        except Exception:  # a config the compiler rejects (too many registers) is skipped
            ms = float("inf")
        timings.append(ms)
    best = min(range(len(configs)), key=lambda k: timings[k])
    return configs[best], timings
