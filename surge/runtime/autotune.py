"""Block sizes, warps and stages: a few candidates per kernel, timed once, cached on disk.

Candidates depend on the kernel's kind and sizes; the first is a heuristic
default. Each candidate is one more binary to compile, which dominates a cold
compile, so by default a kernel runs with a tuned choice found on disk or else
the default. With autotuning on, the first call of a kernel on a GPU times
each candidate on the call's own arguments (kernels only write their outputs,
so running one several times is harmless), keeps the fastest and stores it in
``<cache_dir>/autotune/<key>.json`` for every later process. In the
interpreter the default is used.
"""
from __future__ import annotations

import hashlib
import json
import os

from ..tools.phases import phase_timer


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def candidate_configs(meta: dict, interpret: bool) -> list:
    xnumel, rnumel = meta["xnumel"], meta["rnumel"]
    xcap = next_power_of_2(xnumel)
    if not meta["reduction"]:
        if interpret:
            return [dict(XBLOCK=min(xcap, 128), num_warps=1, num_stages=1)]
        # each candidate is one more binary to compile on a cold cache: keep few
        sizes = [(1024, 4), (2048, 8)]
        out = [dict(XBLOCK=min(x, xcap), num_warps=w if x <= xcap else max(1, min(w, xcap // 128)), num_stages=1)
               for x, w in sizes]
        return _unique(out)
    if meta["persistent"]:
        rblock = next_power_of_2(rnumel)
        if interpret:
            return [dict(XBLOCK=min(xcap, max(1, 64 // rblock)), RBLOCK=rblock, num_warps=1, num_stages=1)]
        # default: 8K-element tiles for long rows, 2K otherwise, ~512 elements per warp
        # (the winners of timing runs on an H200 at 4096 and 1024 columns)
        xblock = max(1, min(xcap, (8192 if rblock >= 4096 else 2048) // rblock))
        out = [dict(XBLOCK=xblock, RBLOCK=rblock, num_warps=min(16, max(4, xblock * rblock // 512)),
                    num_stages=1)]
        for elems, warps in ((4096, 8), (4096, 4), (8192, 16)):
            out.append(dict(XBLOCK=min(xcap, max(1, elems // rblock)), RBLOCK=rblock, num_warps=warps,
                            num_stages=1))
        return _unique(out)
    if interpret:
        return [dict(XBLOCK=1, RBLOCK=min(8, next_power_of_2(rnumel)), num_warps=1, num_stages=1)]
    return _unique([dict(XBLOCK=1, RBLOCK=2048, num_warps=8, num_stages=1),
                    dict(XBLOCK=1, RBLOCK=4096, num_warps=16, num_stages=1),
                    dict(XBLOCK=2, RBLOCK=1024, num_warps=8, num_stages=1)])


def _unique(configs):
    seen, out = set(), []
    for c in configs:
        key = tuple(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def tuning_key(source: str, meta: dict, device_name: str) -> str:
    text = f"{source}|{meta['xnumel']}|{meta['rnumel']}|{device_name}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def load_choice(cache_dir: str, key: str):
    path = os.path.join(cache_dir, "autotune", f"{key}.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def store_choice(cache_dir: str, key: str, config: dict, timings: list) -> None:
    folder = os.path.join(cache_dir, "autotune")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{key}.json")
    tmp = path + f".{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"config": config, "timings_ms": timings}, f)
    os.replace(tmp, path)


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
