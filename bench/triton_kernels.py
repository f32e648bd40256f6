"""Fused memory-bound kernels on a GPU: surge's Triton backend vs torch.compile vs eager.

    python bench/triton_kernels.py [--rows 32768] [--cols 4096] [--json out.json]
    python bench/triton_kernels.py --compile-times     # cold/warm first-call compile, per process
    python bench/triton_kernels.py --defaults          # previous vs current default launch configs

For each workload and dtype it checks the result against eager (relative error
against an fp64 reference), then times surge's kernels, torch.compile
(Inductor) and eager with CUDA events (median of many runs), and reports
achieved bandwidth (fewest bytes: each input read once, each output written
once) as a fraction of the measured device-to-device copy bandwidth.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F


def layer_norm_gelu(x, w, b):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))


def softmax(x):
    return torch.softmax(x, dim=-1)


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def pointwise_chain(x, y):
    ops = [torch.sin, torch.cos, torch.tanh, torch.sigmoid, lambda v: v * 1.5, lambda v: v + y,
           torch.abs, lambda v: v - 0.25, torch.exp, lambda v: torch.clamp(v, -2, 2)]
    for k in range(60):
        x = ops[k % len(ops)](x)
    return x


def arithmetic_chain(x, y):
    """60 cheap ops (no transcendental functions): memory-bound when fused."""
    ops = [lambda v: v * 1.01, lambda v: v + y, lambda v: v - 0.5, lambda v: torch.maximum(v, y),
           lambda v: v * v, lambda v: torch.clamp(v, -4, 4), lambda v: torch.where(v > 0, v, v * 0.1),
           torch.abs, lambda v: v / 1.5, lambda v: v + 1.0]
    for k in range(60):
        x = ops[k % len(ops)](x)
    return x


def make_inputs(name, rows, cols, dtype):
    r = lambda *s: torch.randn(*s, device="cuda", dtype=dtype)  # noqa: E731
    if name == "layer_norm_gelu":
        return (r(rows, cols), r(cols), r(cols))
    if name == "softmax":
        return (r(rows, cols),)
    if name == "rms_norm":
        return (r(rows, cols), r(cols))
    return (r(rows, cols), r(cols))


WORKLOADS = {"layer_norm_gelu": layer_norm_gelu, "softmax": softmax, "rms_norm": rms_norm,
             "pointwise_chain": pointwise_chain, "arithmetic_chain": arithmetic_chain}


def min_bytes(inputs, output):
    return sum(t.numel() * t.element_size() for t in inputs) + output.numel() * output.element_size()


def bench(fn, args):
    from triton.testing import do_bench
    return do_bench(lambda: fn(*args), warmup=25, rep=200, return_mode="median")


def copy_bandwidth(rows, cols):
    x = torch.randn(rows, cols, device="cuda")
    y = torch.empty_like(x)
    ms = bench(lambda a: y.copy_(a), (x,))
    return 2 * x.numel() * 4 / ms / 1e6   # GB/s


def rel_error(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def surge_compile(fn, args, autotune=False):
    import torch._decomp
    from torch.fx.experimental.proxy_tensor import make_fx

    from surge.backends.triton import compile_aten_graph
    from surge.options import Options
    gm = make_fx(fn, decomposition_table=torch._decomp.core_aten_decompositions())(*args)
    return compile_aten_graph(gm, list(args), Options.from_env().replace(autotune=autotune))


AUTOTUNE = False


def run_table(rows, cols):
    bw = copy_bandwidth(rows, cols)
    print(f"device: {torch.cuda.get_device_name()}  copy bandwidth {bw:.0f} GB/s ({rows}x{cols} fp32)")
    results = []
    for name, fn in WORKLOADS.items():
        for dtype in (torch.float32, torch.bfloat16):
            args = make_inputs(name, rows, cols, dtype)
            row = {"workload": name, "dtype": str(dtype).replace("torch.", "")}
            try:
                compiled = surge_compile(fn, args, autotune=AUTOTUNE)
                out = compiled(*args)
                ref = fn(*[a.double() for a in args])
                row["kernels"] = len(compiled.kernel_names)

                row["rel_err"] = rel_error(out, ref)
                row["eager_rel_err"] = rel_error(fn(*args), ref)
                nbytes = min_bytes(args, out)
                row["configs"] = [launch.state.get("config") for launch in compiled.launchers.values()]
                row["surge_ms"] = bench(compiled, args)
                row["eager_ms"] = bench(fn, args)
                inductor = torch.compile(fn)
                inductor(*args)
                row["inductor_ms"] = bench(inductor, args)
                row["surge_GBps"] = nbytes / row["surge_ms"] / 1e6
                row["surge_frac_copy"] = row["surge_GBps"] / bw
                row["inductor_GBps"] = nbytes / row["inductor_ms"] / 1e6
                row["speedup_vs_inductor"] = row["inductor_ms"] / row["surge_ms"]
            except Exception as error:  # report and continue with the next workload
                row["error"] = f"{type(error).__name__}: {error}"[:300]
            results.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'workload':18} {'dtype':9} {'k':>2} {'rel_err':>8} {'surge ms':>9} {'GB/s':>6} {'%copy':>6} "
          f"{'ind ms':>8} {'ind GB/s':>8} {'vs ind':>6} {'eager ms':>8}")
    for r in results:
        if "error" in r:
            print(f"{r['workload']:18} {r['dtype']:9} ERROR {r['error'][:80]}")
            continue
        print(f"{r['workload']:18} {r['dtype']:9} {r['kernels']:>2} {r['rel_err']:8.1e} {r['surge_ms']:9.3f} "
              f"{r['surge_GBps']:6.0f} {100 * r['surge_frac_copy']:5.1f}% {r['inductor_ms']:8.3f} "
              f"{r['inductor_GBps']:8.0f} {r['speedup_vs_inductor']:6.2f} {r['eager_ms']:8.3f}")
    return {"copy_GBps": bw, "rows": rows, "cols": cols, "results": results}


def previous_default(meta):
    """The default launch config before kernel cost and grid size were weighed (for comparison)."""
    from surge.runtime.autotune import next_power_of_2
    xcap = next_power_of_2(meta["xnumel"])
    if not meta["reduction"]:
        return dict(XBLOCK=min(1024, xcap), num_warps=4 if xcap >= 1024 else max(1, min(4, xcap // 128)),
                    num_stages=1)
    if not meta["persistent"]:
        return dict(XBLOCK=1, RBLOCK=2048, num_warps=8, num_stages=1)
    rblock = next_power_of_2(meta["rnumel"])
    xblock = max(1, min(xcap, (8192 if rblock >= 4096 else 2048) // rblock))
    return dict(XBLOCK=xblock, RBLOCK=rblock, num_warps=min(16, max(4, xblock * rblock // 512)), num_stages=1)


def compare_defaults(rows, cols):
    """Each workload with the previous and the current default configs, side by side."""
    from surge.runtime import autotune

    cache_dir = tempfile.mkdtemp()   # stored choices force the previous defaults: keep them apart
    os.environ["SURGE_CACHE_DIR"] = cache_dir
    device = torch.cuda.get_device_name()
    out = []
    for name, fn in WORKLOADS.items():
        for dtype in (torch.float32, torch.bfloat16):
            args = make_inputs(name, rows, cols, dtype)
            row = {"workload": name, "dtype": str(dtype).replace("torch.", "")}
            try:
                current = surge_compile(fn, args)
                current(*args)
                row["current"] = [launch.state["config"] for launch in current.launchers.values()]
                row["current_ms"] = bench(current, args)
                keys = []
                for meta in current.module.KERNELS.values():
                    keys.append(autotune.tuning_key("", meta, device))
                    autotune.store_choice(cache_dir, keys[-1], previous_default(meta), [])
                previous = surge_compile(fn, args)
                previous(*args)
                row["previous"] = [launch.state["config"] for launch in previous.launchers.values()]
                row["previous_ms"] = bench(previous, args)
                for key in keys:
                    os.remove(os.path.join(cache_dir, "autotune", f"{key}.json"))
                inductor = torch.compile(fn)
                inductor(*args)
                row["inductor_ms"] = bench(inductor, args)
            except Exception as error:  # report and continue with the next workload
                row["error"] = f"{type(error).__name__}: {error}"[:300]
            out.append(row)
            print(json.dumps(row), flush=True)

    def short(configs):
        return " ".join(f"{c.get('XBLOCK')}x{c.get('RBLOCK', '')}/{c['num_warps']}w" for c in configs)
    print(f"\n{'workload':18} {'dtype':9} {'previous':>16} {'ms':>7} {'current':>16} {'ms':>7} "
          f"{'speedup':>7} {'ind ms':>7}")
    for r in out:
        if "error" in r:
            print(f"{r['workload']:18} {r['dtype']:9} ERROR {r['error'][:80]}")
            continue
        print(f"{r['workload']:18} {r['dtype']:9} {short(r['previous']):>16} {r['previous_ms']:7.3f} "
              f"{short(r['current']):>16} {r['current_ms']:7.3f} {r['previous_ms'] / r['current_ms']:7.2f} "
              f"{r['inductor_ms']:7.3f}")
    return out


def compile_time_child(name, backend, rows, cols):
    """First call of torch.compile(fn, backend=...) in this process, in seconds."""
    fn = WORKLOADS[name]
    args = make_inputs(name, rows, cols, torch.float32)
    if backend == "surge":
        from surge.backends.triton import triton_backend
        compiled = torch.compile(fn, backend=triton_backend)
    else:
        compiled = torch.compile(fn)
    torch.cuda.synchronize()
    start = time.perf_counter()
    compiled(*args)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def compile_times(rows, cols):
    out = []
    for name in ("layer_norm_gelu", "softmax", "rms_norm", "pointwise_chain"):
        for backend in ("surge", "inductor"):
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ, SURGE_CACHE_DIR=f"{tmp}/surge", TRITON_CACHE_DIR=f"{tmp}/triton",
                           TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor", SURGE_LOGS="perf")
                times = []
                for _ in ("cold", "warm"):
                    proc = subprocess.run([sys.executable, __file__, "--child", name, backend,
                                           "--rows", str(rows), "--cols", str(cols)],
                                          capture_output=True, text=True, env=env, timeout=300)
                    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("SECONDS ")]
                    times.append(float(lines[-1].split()[1]) if lines else float("nan"))
                    perf = [ln for ln in proc.stderr.splitlines() if "[surge:perf]" in ln]
                    if perf:
                        print("\n".join(perf), flush=True)
                    if not lines:
                        print(proc.stderr[-2000:])
            row = {"workload": name, "backend": backend, "cold_s": times[0], "warm_s": times[1]}
            out.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'workload':18} {'backend':9} {'cold s':>7} {'warm s':>7}")
    for r in out:
        print(f"{r['workload']:18} {r['backend']:9} {r['cold_s']:7.2f} {r['warm_s']:7.2f}")
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=32768)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--json")
    parser.add_argument("--compile-times", action="store_true")
    parser.add_argument("--defaults", action="store_true", help="previous vs current default configs")
    parser.add_argument("--child", nargs=2)
    parser.add_argument("--autotune", action="store_true", help="time candidate configs (table only)")
    args = parser.parse_args()
    global AUTOTUNE
    AUTOTUNE = args.autotune
    if args.child:
        print(f"SECONDS {compile_time_child(*args.child, 1024, 1024):.4f}")
        return
    if args.defaults:
        result = compare_defaults(args.rows, args.cols)
    elif args.compile_times:
        result = compile_times(1024, 1024)
    else:
        result = run_table(args.rows, args.cols)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
