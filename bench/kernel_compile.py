"""Kernel compile time of a model's cold first call: every call site, distinct kernels, the pool.

    python bench/kernel_compile.py                                  # gpt_bundled and mlp_train
    python bench/kernel_compile.py --only mlp_train --workers 0,1,3,15

Generates each workload's Triton modules at its GPU sizes on the meta device with
the interpreter off (the kernels a CUDA graph of those sizes gets; no GPU needed),
then compiles their kernels for sm_90 (``GPUTarget("cuda", 90, 32)``: H100/H200)
with the default launch configs, each way in a fresh process with an empty
Triton cache:

- ``every call site``: one compile per call site, as when kernel names carried a
  running index (Triton's cache bypassed: ``TRITON_ALWAYS_COMPILE=1``);
- ``distinct, N workers``: each distinct kernel once through ``compile_pool``
  (the calling process compiles too; 0 workers is serial);
- ``warm``: the last run again in a new process with the Triton cache it left.

Seconds are wall time of the compile step in the child (worker start-up
included, imports of torch and triton not), and its CPU time (process and
children) to tell parallelism from noise on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def generate(workload: str, out_dir: str) -> list:
    """Paths of the generated modules (forward, and backward when training)."""
    os.environ["TRITON_INTERPRET"] = "0"
    import torch

    import surge
    from surge.aot import aot_compile
    from surge.codegen.triton.module import generate_module
    from surge.lowering.lower import lower_graph
    from surge.runtime import code_cache
    from surge.options import CompileConfig
    from surge.schedule import schedule_graph
    from surge.target import triton_target

    paths = []

    def compiler(aten_gm, inputs):
        target, config = triton_target("cuda", interpreted=False), CompileConfig()
        graph, _ = lower_graph(aten_gm, inputs, target=target, config=config)
        source, _ = generate_module(schedule_graph(graph), target, config)
        paths.append(code_cache.write_module(out_dir, "graphs", f"g{len(paths)}", source))
        return aten_gm.forward   # runs on meta tensors: nothing is computed

    def backend(gm, inputs):
        return aot_compile(gm, inputs, fw_compiler=compiler, bw_compiler=compiler)

    if workload == "gpt_bundled":
        from surge.models.gpt import GPT, GPTConfig
        model = GPT(GPTConfig()).to(device="meta", dtype=torch.bfloat16).eval()
        with torch.no_grad():
            surge.compile(model, backend=backend)(torch.zeros(8, 1024, dtype=torch.long, device="meta"))
    elif workload == "mlp_train":
        from surge.tools.workloads import LayerNormMLP
        model = LayerNormMLP(4096, 8).to("meta").train()
        surge.compile(model, backend=backend)(torch.randn(8192, 4096, device="meta")).sum().backward()
    else:
        raise SystemExit(f"unknown workload {workload}")
    return paths


def child(mode: str, workers: int, paths: list) -> dict:
    """Compile the modules' kernels one way; runs in a fresh process."""
    os.environ["SURGE_COMPILE_WORKERS"] = str(workers)
    import triton  # noqa: F401  (imports are not what is measured)

    from surge.runtime import compile_pool
    from surge.runtime.autotune import candidate_configs
    from surge.runtime.code_cache import load_module
    from surge.runtime.kernel_files import kernel_folder, no_precompile

    jobs = []
    for path in paths:
        with no_precompile():
            module = load_module(path)
        for meta in module.KERNELS.values():
            jobs.append(compile_pool.job_for(os.path.join(kernel_folder(path), meta["file"] + ".py"), meta,
                                             candidate_configs(meta, interpret=False)[0], ("cuda", 90, 32)))
    distinct = list({j.key(): j for j in jobs}.values())
    start = time.perf_counter()
    if mode == "every":
        for job in jobs:
            compile_call_site(job)
        ran = jobs
    else:
        compile_pool.start_workers(len(distinct))
        ran = compile_pool.prepare(distinct)
    seconds = time.perf_counter() - start
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return {"call_sites": len(jobs), "distinct": len(distinct), "compiled": len(ran),
            "in_workers": sum(1 for j in ran if j.where == "worker"),
            "failed": [j.error for j in ran if j.error][:3], "seconds": seconds,
            "cpu_seconds": sum(u.ru_utime + u.ru_stime for u in usage)}


def compile_call_site(job) -> None:
    """One call site compiled on its own, as Triton's JIT did when each had a name of its own."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from surge.runtime.kernel_files import import_kernel_file

    fn = getattr(import_kernel_file(job.path, os.path.basename(job.path)[:-3]), job.function)
    consts = {k: v for k, v in job.config.items() if k in ("XBLOCK", "RBLOCK")}
    params = list(fn.arg_names)
    types = [f"*{_POINTER[d]}" for d in job.arg_dtypes] + ["i32"] * len(job.sizes)
    signature = dict(zip(params, types), **{k: "constexpr" for k in consts})
    triton.compile(ASTSource(fn=fn, signature=signature, constexprs=consts), target=GPUTarget(*job.target),
                   options={"num_warps": job.config["num_warps"]})


_POINTER = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int64": "i64",
            "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1"}


def run_child(mode: str, workers: int, paths: list, triton_cache: str) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=triton_cache)
    if mode == "every":
        env["TRITON_ALWAYS_COMPILE"] = "1"
    proc = subprocess.run([sys.executable, __file__, "--child", mode, str(workers), *paths],
                          capture_output=True, text=True, env=env, timeout=3600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": proc.stderr[-1500:]}
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="gpt_bundled,mlp_train")
    parser.add_argument("--workers", default=None,
                        help="comma-separated worker counts (default: 0 and one fewer than the CPUs)")
    parser.add_argument("--skip-every", action="store_true", help="skip the every-call-site run (slow)")
    parser.add_argument("--child", nargs="+")
    parser.add_argument("--generate", nargs=2)
    args = parser.parse_args()
    if args.child:
        mode, workers, *paths = args.child
        print(json.dumps(child(mode, int(workers), paths)))
        return
    if args.generate:
        print(json.dumps(generate(*args.generate)))
        return
    from surge.runtime.compile_pool import pool_size
    counts = [int(w) for w in args.workers.split(",")] if args.workers else sorted({0, pool_size()})
    rows = []
    for workload in args.only.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            gen = subprocess.run([sys.executable, __file__, "--generate", workload, tmp], capture_output=True,
                                 text=True, env=dict(os.environ, TRITON_INTERPRET="0"), timeout=1200)
            paths = json.loads(gen.stdout.strip().splitlines()[-1])
            runs = [] if args.skip_every else [("every call site", "every", 0)]
            runs += [(f"distinct, {n} workers", "pool", n) for n in counts]
            for label, mode, n in runs:
                cache = os.path.join(tmp, f"triton-{mode}-{n}")
                rows.append({"workload": workload, "run": label, **run_child(mode, n, paths, cache)})
                print(json.dumps(rows[-1]), flush=True)
            rows.append({"workload": workload, "run": "warm", **run_child("pool", counts[-1], paths, cache)})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'workload':12} {'run':22} {'sites':>5} {'distinct':>8} {'in workers':>10} {'wall s':>7} {'cpu s':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['workload']:12} {r['run']:22} ERROR {r['error'][-300:]}")
            continue
        print(f"{r['workload']:12} {r['run']:22} {r['call_sites']:5} {r['distinct']:8} {r['in_workers']:10} "
              f"{r['seconds']:7.2f} {r['cpu_seconds']:7.2f}")


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    main()
