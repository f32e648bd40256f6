"""Compile a generated module's kernels for a GPU target without a GPU.

Triton compiles for ``GPUTarget("cuda", 90, 32)`` (H100/H200) on any machine
(``compile_pool`` runs its JIT under a driver that names the target), so code
generation errors (types, shapes, unsupported operations) show up in CI where
kernels can otherwise only run in the interpreter.
"""
from __future__ import annotations

import os

from .autotune import at_hints, candidate_configs
from .code_cache import load_module
from .triton_mode import interpret_mode


def compile_for_target(paths, arch: int = 90, warp_size: int = 32, workers: int | None = None) -> dict:
    """{"<module file>:<kernel>": "ok" or the error} for every kernel of the modules at ``paths``
    (a module that cannot be loaded: {path: the error}); each distinct kernel is compiled
    once, in parallel (``compile_pool``, at most ``workers`` processes), with its default config."""
    from . import compile_pool
    from .kernel_files import kernel_folder, no_precompile

    target = ("cuda", arch, warp_size)
    jobs, results = {}, {}
    for path in paths:
        try:
            with interpret_mode(False), no_precompile():
                module = load_module(path)
        except Exception as error:  # report every module's failure, keep going
            results[path] = f"{type(error).__name__}: {error}"
            continue
        folder = kernel_folder(path)
        for name, meta in module.KERNELS.items():
            job = compile_pool.job_for(os.path.join(folder, meta["file"] + ".py"), meta,
                                       candidate_configs(at_hints(meta), interpret=False)[0], target)
            jobs[f"{os.path.basename(path)}:{name}"] = job
    distinct = {job.key(): job for job in jobs.values()}
    compile_pool.start_workers(len(distinct), workers)
    compile_pool.prepare(list(distinct.values()))
    results.update({label: distinct[job.key()].error or "ok" for label, job in jobs.items()})
    return results


def compile_in_subprocess(paths, arch: int = 90, timeout: float = 600) -> dict:
    """Run ``compile_for_target`` in a fresh process with the interpreter off.

    Triton fixes interpreted-or-compiled when it is imported, so a process that
    runs kernels in the interpreter cannot also compile them for a GPU.
    Returns {kernel name: "ok" or the error text}.
    """
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, TRITON_INTERPRET="0")
    proc = subprocess.run([sys.executable, "-m", "surge.runtime.target_compile", str(arch), *paths],
                          capture_output=True, text=True, env=env, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"target compile failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(lines[-1])


def _main(argv) -> int:
    import json

    from ..options import Options
    print(json.dumps(compile_for_target(argv[1:], int(argv[0]), workers=Options.from_env().compile_workers)))
    return 0


if __name__ == "__main__":
    import sys
    raise SystemExit(_main(sys.argv[1:]))
