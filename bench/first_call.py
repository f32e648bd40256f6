"""Where a fresh process's first call goes, and how much of it is compile time, cold and warm.

    python bench/first_call.py --only seed_block_fp32,mlp_train            # surge, quick sizes, CPU
    python bench/first_call.py --contenders surge,torch.compile --backend cpp --threads 1
    python bench/first_call.py --device cuda --full --only gpt_bundled     # on a GPU machine

For each workload and contender, two fresh processes run the same first call
(as ``python -m surge bench --fresh-process-compile`` times it: making the
contender, its ``compile(target)`` and the first call; for a training workload
the call is forward, loss and backward): "cold" with empty caches
(``SURGE_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR`` in a new
temporary folder), then "warm" with what the cold run left. Each child runs under
``python -X importtime`` and reports:

- ``import torch`` and ``import surge`` (before the timed span, not in it);
- the timed first call, and within it the self time of every module imported
  during it, summed by package (``torch._dynamo``, ``sympy``, ``triton``, ...);
- surge's compile time by phase (capture, aot, lowering, ..., kernel_compile),
  and its graph-cache hits and C++ compiler runs.

The eager baseline: the first call also does the work itself and pays one-time
start-up that running uncompiled pays as well (on a GPU: the first cuBLAS handle,
lazy CUDA module loading, the allocator's first blocks). So the contender "eager"
(the target called as is) runs the same timed span in one fresh process per
``--repeat`` ("cold" only: eager keeps no cache). It runs by default when the
summary prints ratios (``--contenders`` has both surge and torch.compile);
``--eager-baseline`` / ``--no-eager-baseline`` force it on or off.

The summary, one row per workload and compiling contender, each number the
fastest of the ``--repeat`` runs (the least disturbed on a shared machine):

- ``cold``, ``warm``: the raw timed first call, seconds;
- ``eager``: eager's timed first call of the same workload, seconds;
- ``net cold``, ``net warm``: the compile time a user sees, the raw first call
  minus eager's, floored at ``NET_FLOOR_S`` (1 ms; shown as ``<0.001s``) so that
  a ratio stays finite when a contender is within noise of eager;
- on surge's row ``cold 1/a (net 1/b), warm 1/c (net 1/d)``: torch.compile's
  seconds divided by surge's, raw (a, c) and net (b, d); 1/10 means surge's first
  call takes a tenth of torch.compile's.

``--json FILE`` writes ``{"runs": [...], "summary": [...]}``: every child's
result (eager's included, ``contender: "eager"``) and the summary rows with the
same numbers as fields (``cold_s``, ``warm_s``, ``eager_s``, ``net_cold_s``,
``net_warm_s``, and on surge's row the four ratios); absent numbers are null.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "@@first-call-begin@@", "@@first-call-end@@"
CACHE_VARS = ("SURGE_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
NET_FLOOR_S = 0.001   # net compile time never shown below this: keeps ratios finite
COMPILING = ("surge", "torch.compile")


def child(args) -> None:
    """The body of one fresh process: prints one JSON line."""
    t0 = time.perf_counter()
    import torch
    t1 = time.perf_counter()
    import surge
    t2 = time.perf_counter()
    from surge.tools import timing, workloads
    from surge.tools.contenders import make_contender
    from surge.observe.phases import phase_timer

    if args.threads:
        torch.set_num_threads(args.threads)
    instance = workloads.build(args.child, args.device, "full" if args.full else "quick")
    inputs = instance.make_inputs(0)
    target = instance.fresh_target()
    backend = args.backend if args.contender == "surge" else None

    def compile_and_call():
        compiled = make_contender(args.contender, backend).compile(target)
        return instance.run(compiled, target, inputs)
    profiler = None
    if args.profile:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    print(BEGIN, file=sys.stderr, flush=True)
    seconds, _ = timing.timed_once(compile_and_call, args.device)
    print(END, file=sys.stderr, flush=True)
    if profiler is not None:
        import pstats
        profiler.disable()
        stem = f"{args.profile}.{args.child}.{args.contender}.{args.run}"
        profiler.dump_stats(f"{stem}.prof")  # for pstats' callers/callees views
        with open(f"{stem}.txt", "w") as f:
            pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(60)
    phases = phase_timer.summary() if args.contender == "surge" else {}
    counters = {k: v for k, v in surge.counters.items() if k in ("graph_cache_hits", "binary_cache_hits", "cpp_compiles", "kernels")}
    pool = sys.modules.get("surge.runtime.compile_pool")
    if pool is not None:   # kernels compiled ahead of their launch: how many, where
        counters.update(compiled=pool.POOL.totals["jobs"], in_workers=pool.POOL.totals["in_workers"],
                        workers=len(pool.POOL.workers))
    print(json.dumps({"import_torch_s": t1 - t0, "import_surge_s": t2 - t1, "first_call_s": seconds,
                      "phases_s": phases, "counters": counters}))


def package_of(module: str) -> str:
    parts = module.strip().split(".")
    return ".".join(parts[:2]) if parts[0] in ("torch", "surge", "triton") else parts[0]


def imports_in_window(stderr: str) -> dict:
    """Seconds of import self time per package, for modules imported inside the timed span."""
    inside, totals = False, {}
    for line in stderr.splitlines():
        if line.startswith(BEGIN):
            inside = True
        elif line.startswith(END):
            break
        elif inside and line.startswith("import time:") and "|" in line:
            self_us, _, name = line[len("import time:"):].split("|")
            if self_us.strip().isdigit():
                package = package_of(name)
                totals[package] = totals.get(package, 0.0) + int(self_us) / 1e6
    return totals


def run_child(args, workload: str, contender: str, run: str, env: dict) -> dict:
    cmd = [sys.executable, "-X", "importtime", os.path.abspath(__file__), "--child", workload,
           "--contender", contender, "--device", args.device, "--backend", args.backend or "", "--run", run]
    if args.profile:
        cmd += ["--profile", args.profile]
    if args.full:
        cmd.append("--full")
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{contender} on {workload} failed:\n{proc.stderr[-2000:]}")
    result = json.loads(lines[-1])
    result["imports_s"] = imports_in_window(proc.stderr)
    return result


def report(workload: str, contender: str, run: str, r: dict) -> str:
    imports = sorted(r["imports_s"].items(), key=lambda kv: -kv[1])
    total_imports = sum(v for _, v in imports)
    top = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in imports[:6] if v >= 0.005)
    phases = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in r["phases_s"].items() if v >= 0.0005)
    counters = ", ".join(f"{k}={v}" for k, v in r["counters"].items() if v) if contender == "surge" else ""
    return (f"{workload:16} {contender:13} {run:4}  first call {r['first_call_s']:7.3f}s"
            f"  (import torch {r['import_torch_s']:.2f}s, surge {r['import_surge_s'] * 1e3:.0f}ms before it)\n"
            f"{'':36}imports inside {total_imports * 1e3:5.0f}ms: {top or '-'}\n"
            + (f"{'':36}phases ms: {phases or '-'}   {counters}\n" if contender == "surge" else ""))


def fastest(results: list) -> dict:
    """(workload, contender, run) -> the fastest first call among the repeats."""
    best: dict = {}
    for r in results:
        key = (r["workload"], r["contender"], r["run"])
        best[key] = min(best.get(key, float("inf")), r["first_call_s"])
    return best


def net_seconds(first_call_s: float | None, eager_s: float | None) -> float | None:
    """What a first call costs beyond eager's first call: its compile time (None without both)."""
    if first_call_s is None or eager_s is None:
        return None
    return max(first_call_s - eager_s, NET_FLOOR_S)


def summary_rows(results: list) -> list[dict]:
    """Per workload and compiling contender: raw and net first calls, and surge's ratios.

    Eager is a column (the baseline), not a row, unless it is the only contender.
    A ratio is torch.compile's seconds over surge's, raw and net, cold and warm."""
    best = fastest(results)
    contenders = list(dict.fromkeys(r["contender"] for r in results))
    shown = [c for c in contenders if c != "eager"] or ["eager"]
    rows = []
    for workload in dict.fromkeys(r["workload"] for r in results):
        eager = best.get((workload, "eager", "cold"))
        for contender in shown:
            cold, warm = best.get((workload, contender, "cold")), best.get((workload, contender, "warm"))
            baseline = eager if contender != "eager" else None
            rows.append(dict(workload=workload, contender=contender, cold_s=cold, warm_s=warm, eager_s=eager,
                             net_cold_s=net_seconds(cold, baseline), net_warm_s=net_seconds(warm, baseline)))
    by_key = {(row["workload"], row["contender"]): row for row in rows}
    for row in rows:
        peer = by_key.get((row["workload"], "torch.compile"))
        if row["contender"] == "surge" and peer is not None:
            for run in ("cold", "warm", "net_cold", "net_warm"):
                ours, theirs = row[f"{run}_s"], peer[f"{run}_s"]
                row[f"ratio_{run}"] = None if ours is None or theirs is None else theirs / ours
    return rows


def seconds_text(seconds: float | None, net: bool = False) -> str:
    if seconds is None:
        return "-"
    if net and seconds <= NET_FLOOR_S:
        return f"<{NET_FLOOR_S:.3f}s"
    return f"{seconds:.3f}s"


def ratio_text(row: dict) -> str:
    """``cold 1/2.9 (net 1/3.4), warm 1/8.9 (net 1/21)`` for surge's row, else empty."""
    def one_over(x: float) -> str:
        return f"1/{x:.0f}" if x >= 10 else f"1/{x:.1f}"
    parts = []
    for run in ("cold", "warm"):
        raw, net = row.get(f"ratio_{run}"), row.get(f"ratio_net_{run}")
        if raw is not None:
            parts.append(f"{run} {one_over(raw)}" + (f" (net {one_over(net)})" if net is not None else ""))
    return ", ".join(parts)


def summary(results: list) -> str:
    """The summary table (see the module docstring for what each number is)."""
    lines = ["", f"net = first call - eager's first call, floored at {NET_FLOOR_S * 1e3:.0f} ms;"
                 " surge / torch.compile = torch.compile's seconds over surge's, raw (net)",
             f"{'workload':16} {'contender':13} {'cold':>8} {'warm':>8} {'eager':>8} {'net cold':>8}"
             f" {'net warm':>8}   surge / torch.compile"]
    for row in summary_rows(results):
        lines.append(f"{row['workload']:16} {row['contender']:13} {seconds_text(row['cold_s']):>8}"
                     f" {seconds_text(row['warm_s']):>8} {seconds_text(row['eager_s']):>8}"
                     f" {seconds_text(row['net_cold_s'], net=True):>8} {seconds_text(row['net_warm_s'], net=True):>8}"
                     f"   {ratio_text(row)}".rstrip())
    return "\n".join(lines)


def wants_eager_baseline(contenders: list[str], flag: bool | None) -> bool:
    """Eager runs unless told otherwise when the summary prints ratios (surge and torch.compile)."""
    if flag is not None:
        return flag
    return all(c in contenders for c in COMPILING)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="seed_block_fp32,layernorm_gelu,mlp_train,gpt_bundled")
    p.add_argument("--contenders", default="surge", help="comma-separated: surge, torch.compile, eager")
    p.add_argument("--eager-baseline", action=argparse.BooleanOptionalAction, default=None,
                   help="also time eager's first call in a fresh process (one per --repeat, cold only) and "
                        "show each contender's net compile time = first call - eager's; on by default when "
                        "--contenders has both surge and torch.compile (the summary prints ratios)")
    p.add_argument("--backend", default=None, help="surge backend (default: surge's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--full", action="store_true", help="full sizes (default: the bench's --quick sizes)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per workload and contender (a cold+warm pair; eager: one cold run); the summary "
                        "takes the fastest (the least disturbed on a shared machine)")
    p.add_argument("--json", metavar="FILE", help='write {"runs": [every child\'s result], "summary": [the table\'s rows]}')
    p.add_argument("--profile", metavar="PREFIX",
                   help="write each child's cProfile of the timed span to PREFIX.<workload>.<contender>.<run>.txt "
                        "(top functions) and .prof (the whole profile)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--run", help=argparse.SUPPRESS)
    p.add_argument("--contender", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.backend = args.backend or None
    if args.child:
        child(args)
        return 0
    contenders = args.contenders.split(",")
    if wants_eager_baseline(contenders, args.eager_baseline) and "eager" not in contenders:
        contenders.insert(0, "eager")
    results = []
    for workload in args.only.split(","):
        for _ in range(args.repeat):
            for contender in contenders:
                with tempfile.TemporaryDirectory(prefix="surge-first-call-") as root:
                    env = dict(os.environ,
                               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
                    env.update({var: os.path.join(root, var.lower()) for var in CACHE_VARS})
                    for run in ("cold",) if contender == "eager" else ("cold", "warm"):  # eager keeps no cache
                        r = run_child(args, workload, contender, run, env)
                        print(report(workload, contender, run, r), end="", flush=True)
                        results.append(dict(r, workload=workload, contender=contender, run=run))
    print(summary(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": results, "summary": summary_rows(results)}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
