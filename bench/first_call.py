"""Where a fresh process's first call goes: by phase and by import, cold and warm.

    python bench/first_call.py --only seed_block_fp32,mlp_train            # surge, quick sizes, CPU
    python bench/first_call.py --contenders surge,torch.compile --backend cpp --threads 1
    python bench/first_call.py --device cuda --full --only gpt_bundled     # on a GPU machine

For each workload and contender, two fresh processes run the same first call
(as ``python -m surge bench --fresh-process-compile`` times it: making the
contender, its ``compile(target)`` and the first call): "cold" with empty caches
(``SURGE_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR`` in a new
temporary folder), then "warm" with what the cold run left. Each child runs under
``python -X importtime`` and reports:

- ``import torch`` and ``import surge`` (before the timed span, not in it);
- the timed first call, and within it the self time of every module imported
  during it, summed by package (``torch._dynamo``, ``sympy``, ``triton``, ...);
- surge's compile time by phase (capture, aot, lowering, ..., kernel_compile),
  and its graph-cache hits and C++ compiler runs.
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


def child(args) -> None:
    """The body of one fresh process: prints one JSON line."""
    t0 = time.perf_counter()
    import torch
    t1 = time.perf_counter()
    import surge
    t2 = time.perf_counter()
    from surge.tools import timing, workloads
    from surge.tools.contenders import make_contender
    from surge.tools.phases import phase_timer

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
    return (f"{workload:16} {contender:13} {run:4}  first call {r['first_call_s']:6.2f}s"
            f"  (import torch {r['import_torch_s']:.2f}s, surge {r['import_surge_s'] * 1e3:.0f}ms before it)\n"
            f"{'':36}imports inside {total_imports * 1e3:5.0f}ms: {top or '-'}\n"
            + (f"{'':36}phases ms: {phases or '-'}   {counters}\n" if contender == "surge" else ""))


def summary(results: list) -> str:
    """The fastest cold and warm first call per workload and contender, and surge's ratios."""
    best: dict = {}
    for r in results:
        key = (r["workload"], r["contender"], r["run"])
        best[key] = min(best.get(key, float("inf")), r["first_call_s"])
    lines = ["", f"{'workload':16} {'contender':13} {'cold':>7} {'warm':>7}   surge / torch.compile"]
    for workload in dict.fromkeys(r["workload"] for r in results):
        for contender in dict.fromkeys(r["contender"] for r in results):
            cold, warm = best.get((workload, contender, "cold")), best.get((workload, contender, "warm"))
            ratio = ""
            tc = (best.get((workload, "torch.compile", "cold")), best.get((workload, "torch.compile", "warm")))
            if contender == "surge" and None not in tc:
                ratio = f"cold 1/{tc[0] / cold:.1f}, warm 1/{tc[1] / warm:.1f}"
            lines.append(f"{workload:16} {contender:13} {cold:6.2f}s {warm:6.2f}s   {ratio}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="seed_block_fp32,layernorm_gelu,mlp_train,gpt_bundled")
    p.add_argument("--contenders", default="surge")
    p.add_argument("--backend", default=None, help="surge backend (default: surge's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--full", action="store_true", help="full sizes (default: the bench's --quick sizes)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=1,
                   help="cold+warm pairs per workload and contender; the summary takes the fastest "
                        "(the least disturbed on a shared machine)")
    p.add_argument("--json", metavar="FILE")
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
    results = []
    for workload in args.only.split(","):
        for _ in range(args.repeat):
            for contender in args.contenders.split(","):
                with tempfile.TemporaryDirectory(prefix="surge-first-call-") as root:
                    env = dict(os.environ,
                               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
                    env.update({var: os.path.join(root, var.lower()) for var in CACHE_VARS})
                    for run in ("cold", "warm"):
                        r = run_child(args, workload, contender, run, env)
                        print(report(workload, contender, run, r), end="", flush=True)
                        results.append(dict(r, workload=workload, contender=contender, run=run))
    print(summary(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
