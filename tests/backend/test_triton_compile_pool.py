"""Kernels compiled ahead of their launch, in worker processes, into Triton's on-disk cache.

Compiling for sm_90 needs Triton with its interpreter off, which a process that
interprets kernels cannot switch to, so each check runs in a fresh process.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from .helpers import compile_fn, randn
from .structure_programs import layer_norm_gelu, pointwise_chain, softmax


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path, monkeypatch):
    """Modules of this file's programs stay out of the session's cache (other tests
    compile some of the same programs and expect a fresh compile)."""
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path / "surge_cache"))


PROGRAM = textwrap.dedent("""
    import json, os, sys, time
    from surge.options import Options
    from surge.runtime import compile_pool
    from surge.runtime.autotune import candidate_configs
    from surge.runtime.code_cache import load_module
    from surge.runtime.kernel_files import kernel_folder, no_precompile

    def jobs_of(paths):
        jobs = []
        for path in paths:
            with no_precompile():
                module = load_module(path)
            for meta in module.KERNELS.values():
                jobs.append(compile_pool.job_for(os.path.join(kernel_folder(path), meta["file"] + ".py"), meta,
                                                 candidate_configs(meta, interpret=False)[0], ("cuda", 90, 32)))
        return jobs

    def cache_entries():
        root = os.environ["TRITON_CACHE_DIR"]
        return sorted(os.listdir(root)) if os.path.isdir(root) else []

    mode, paths = sys.argv[1], sys.argv[2:]
    jobs = jobs_of(paths)
    out = {"call_sites": len(jobs), "distinct": len({j.key() for j in jobs})}
    if mode == "worker":
        # one worker, driven directly: it compiles a job into the on-disk cache, reports a
        # broken job without dying, and the calling process then finds the binary there
        worker = compile_pool._Worker()
        out["ready"] = worker.ready()
        # ready without torch, whose import takes longer than several compiles (some
        # Triton versions import it later, when they compile)
        with open(f"/proc/{worker.proc.pid}/maps") as maps:
            out["ready_without_torch"] = not any("libtorch" in line for line in maps)
        out["worker"] = worker.run(jobs[0])[0]
        with open(f"/proc/{worker.proc.pid}/maps") as maps:   # Triton 3.6-3.7 import torch to compile
            out["compiled_without_torch"] = not any("libtorch" in line for line in maps)
        bad = compile_pool.KernelJob(jobs[0].path, "no_such_kernel", (), (1,), {}, ("cuda", 90, 32))
        out["bad"] = worker.run(bad)[0]
        out["after_bad"] = worker.run(jobs[1])[0]
        # a job for this process's GPU (target None): the worker gets the GPU's target by name
        from triton.backends.compiler import GPUTarget
        from triton.runtime.driver import driver
        driver.set_active(compile_pool._TargetOnlyDriver(GPUTarget("cuda", 90, 32)))  # stands for the GPU
        mine = jobs[2]
        device_job = compile_pool.KernelJob(mine.path, mine.function, mine.arg_dtypes, mine.sizes, mine.config)
        device_job.worker_target = compile_pool._current_target()
        out["device_job"] = [device_job.message(for_worker=True)["target"], worker.run(device_job)[0]]
        driver.set_active(None)
        worker.close()
        before = cache_entries()
        kernel = compile_pool.compile_job(jobs[0].message())
        out["new_entries"] = len(cache_entries()) - len(before)
        # a launch passes tensors, not dtypes: the same specialization finds the same kernel
        import torch
        from surge.runtime.kernel_files import import_kernel_file
        job = jobs[0]
        fn = getattr(import_kernel_file(job.path, os.path.basename(job.path)[:-3]), job.function)
        tensors = [torch.empty(64, dtype=getattr(torch, d)) for d in job.arg_dtypes]
        with compile_pool.target_driver(job.target):
            out["same_kernel"] = fn.warmup(*tensors, *job.sizes, grid=(1,), **job.config) is kernel
    elif mode == "all_in_a_worker":
        worker = compile_pool._Worker()
        out["ready"] = worker.ready()
        out["errors"] = [worker.run(job)[0] for job in jobs]
        worker.close()
    elif mode == "pool":
        compile_pool.start_workers(len(jobs), Options.from_env().compile_workers)
        out["workers"] = len(compile_pool.POOL.workers)
        ran = compile_pool.prepare(jobs)
        out["ran"] = len(ran)
        out["errors"] = [j.error for j in ran if j.error]
        out["again"] = len(compile_pool.prepare(jobs_of(paths)))
        out["entries"] = len(cache_entries())
        # a batch whose kernels are all in Triton's cache ends before a worker is ready: the
        # workers still starting are stopped, and the next batch starts its own
        warm = compile_pool.CompilePool()
        warm.start_workers(len(jobs), 1)
        starting = list(warm.workers)
        warm.prepare(jobs_of(paths))
        out["retired"] = [len(starting), len(warm.workers), [w.proc.wait(10) is not None for w in starting]]
        warm.start_workers(len(jobs), 1)
        out["restarted"] = len(warm.workers)
        warm.shutdown()
        # workers that cannot start: the calling process compiles everything itself
        broken = compile_pool.CompilePool()
        compile_pool.sys.executable = "/bin/false"
        broken.start_workers(len(jobs), Options.from_env().compile_workers)
        fallback = broken.prepare(jobs_of(paths))
        out["fallback"] = [len(fallback), sum(j.where == "process" for j in fallback),
                           [j.error for j in fallback if j.error]]
    elif mode == "submit":
        # queued without waiting (the caller lowers the next graph meanwhile); a kernel queued
        # once is not queued again; the first launch's wait finishes every queued job
        pool = compile_pool.CompilePool()
        pool.start_workers(len(jobs), Options.from_env().compile_workers)
        first = pool.submit(jobs[:2])
        rest = pool.submit(jobs)
        out["queued"] = [len(first), len(rest), len(pool.pending)]
        pool.finish_pending()
        out["finished"] = [j.done.is_set() and j.error is None for j in first + rest]
        out["pending_after"] = len(pool.pending)
        out["again"] = len(pool.submit(jobs_of(paths)))
        out["totals"] = [pool.totals["jobs"], pool.totals["batches"]]
        pool.shutdown()
    elif mode == "binary":
        # a compiled kernel kept in surge's cache is rebuilt from it without Triton's compiler
        import shutil
        from surge.runtime import binary_cache
        from surge.runtime.kernel_files import import_kernel_file
        job = jobs[0]
        fn = getattr(import_kernel_file(job.path, os.path.basename(job.path)[:-3]), job.function)
        kernel = compile_pool.compile_job(job.message())
        root = os.environ["SURGE_CACHE_DIR"]
        out["stored"] = binary_cache.store(root, "k", kernel)
        loaded = binary_cache.load(root, "k", fn)
        out["same_binary"] = loaded.kernel == kernel.kernel and loaded.hash == kernel.hash
        out["same_metadata"] = loaded.metadata == kernel.metadata
        out["same_launcher_source"] = (dict(loaded.src.signature) == dict(kernel.src.signature)
                                       and dict(loaded.src.constants) == dict(kernel.src.constants))
        out["shared"] = binary_cache.load(root, "k", fn) is loaded  # another call site of the kernel
        shutil.rmtree(os.path.join(root, "binaries", "k"))
        out["missing"] = binary_cache.load(root, "k", fn) is None
    print(json.dumps(out))
""")


def _modules(tmp_path):
    """Generated modules with a repeated kernel (the sm_90 compile loads them itself)."""
    paths = []
    for fn, args in ((layer_norm_gelu, (randn(6, 48), randn(48), randn(48))),
                     (softmax, (randn(5, 37),)), (pointwise_chain, (randn(7, 9), randn(9))),
                     (layer_norm_gelu, (randn(7, 48), randn(48), randn(48)))):   # same kernel, other graph
        paths.append(compile_fn(fn, *args).path)
    return paths


def _run(tmp_path, mode, paths, **env):
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path / "triton"), **env)
    proc = subprocess.run([sys.executable, "-c", PROGRAM, mode, *paths], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_worker_compiles_into_the_disk_cache_the_launch_reads(tmp_path):
    out = _run(tmp_path, "worker", _modules(tmp_path)[:3])
    assert out["ready"] and out["worker"] is None and out["after_bad"] is None
    assert out["ready_without_torch"] and out["compiled_without_torch"]
    assert out["device_job"] == [["cuda", 90, 32], None]
    assert "no_such_kernel" in out["bad"]
    assert out["new_entries"] == 0, "the calling process found the worker's binary"
    assert out["same_kernel"]


def test_pool_compiles_each_distinct_kernel_once(tmp_path):
    paths = _modules(tmp_path)
    out = _run(tmp_path, "pool", paths, SURGE_COMPILE_WORKERS="1")
    assert out["call_sites"] == 4 and out["distinct"] == 3   # the repeated LayerNorm+GELU is one
    assert out["ran"] == 3 and out["errors"] == [] and out["workers"] == 1
    assert out["again"] == 0, "a kernel compiled once in a process is not compiled again"
    assert out["entries"] >= 3
    assert out["retired"] == [1, 0, [True]] and out["restarted"] == 1
    assert out["fallback"] == [3, 3, []]


def test_submitted_kernels_compile_while_the_caller_goes_on(tmp_path):
    out = _run(tmp_path, "submit", _modules(tmp_path), SURGE_COMPILE_WORKERS="1")
    assert out["queued"] == [2, 1, 3]   # the second LayerNorm+GELU call site is the first's kernel
    assert out["finished"] == [True, True, True] and out["pending_after"] == 0
    assert out["again"] == 0 and out["totals"] == [3, 1]


def test_a_kept_binary_is_rebuilt_without_compiling(tmp_path):
    out = _run(tmp_path, "binary", _modules(tmp_path)[:1])
    assert out["stored"] and out["same_binary"] and out["same_metadata"] and out["same_launcher_source"]
    assert out["shared"] and out["missing"]


def test_binary_keys_follow_everything_the_binary_is_specialized_on():
    from surge.runtime.binary_cache import record_key

    meta = dict(file="abc", function="k", xnumel=4096, rnumel=512, reduction=True,
                signature={"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32", "rnumel": "i32"})
    config = dict(XBLOCK=64, RBLOCK=32, num_warps=4, num_stages=1)
    key = record_key(meta, config, "H200")
    assert key == record_key(dict(meta), dict(config), "H200")
    assert key == record_key(dict(meta, xnumel=8192), config, "H200")      # Triton does not specialize on it
    assert key != record_key(dict(meta, xnumel=4097), config, "H200")      # no longer a multiple of 16
    assert key != record_key(meta, dict(config, num_warps=8), "H200")
    assert key != record_key(meta, config, "H100")
    assert key != record_key(dict(meta, signature={**meta["signature"], "in_ptr0": "*bf16"}), config, "H200")


def test_binary_keys_follow_tritons_compile_environment(monkeypatch):
    from surge.runtime import binary_cache

    meta = dict(file="abc", function="k", xnumel=64, rnumel=1, reduction=False, signature={"out_ptr0": "*fp32"})
    config = dict(XBLOCK=64, num_warps=1, num_stages=1)
    before = binary_cache.record_key(meta, config, "H200")
    monkeypatch.setattr(binary_cache, "_compile_environment", lambda: [("TRITON_DEFAULT_FP_FUSION", "0")])
    assert binary_cache.record_key(meta, config, "H200") != before


def test_launchers_of_kernels_compiled_here_are_built_beside_the_next_compile(monkeypatch):
    """The calling thread compiles; each kernel's launcher is built in a thread of its own,
    and ``finish_pending`` returns only when every one is built."""
    import threading
    import time

    from surge.runtime import compile_pool

    compiled, built = [], []
    monkeypatch.setattr(compile_pool, "compile_job", lambda message: compiled.append(message["function"]) or
                        message["function"])

    def build(kernel):
        time.sleep(0.1)
        built.append((kernel, threading.get_ident()))

    monkeypatch.setattr(compile_pool, "_build_launcher", build)
    pool = compile_pool.CompilePool()   # no workers: everything compiles in this thread
    jobs = [compile_pool.KernelJob(f"k{i}.py", f"kernel{i}", ("float32",), (16 * (i + 1) + 1,), {}) for i in range(3)]
    assert len(pool.submit(jobs)) == 3 and compiled == []   # queued, not compiled yet
    pool.finish_pending()
    assert compiled == ["kernel0", "kernel1", "kernel2"]
    assert sorted(k for k, _ in built) == compiled, "every launcher was built before finish_pending returned"
    assert threading.get_ident() not in {t for _, t in built}
    assert pool.totals["in_process"] == 3 and pool.launcher_builds == []


def _bool_pointers(x, mask):
    return (x > 0) & mask.logical_not(), torch.where(mask, x, 0.0).sum(-1)


def test_kernels_with_bool_pointers_compile_in_a_worker(tmp_path):
    """A bool pointer is ``*i1`` to some Tritons and ``*u1`` to others: a worker's check of
    what it compiled against the launch's dtypes must take both (else each such kernel
    was reported failed and compiled again at its launch)."""
    paths = [compile_fn(_bool_pointers, randn(6, 33), randn(6, 33) > 0).path]
    out = _run(tmp_path, "all_in_a_worker", paths)
    assert out["ready"] and out["call_sites"] >= 1
    assert out["errors"] == [None] * out["call_sites"], out["errors"]
