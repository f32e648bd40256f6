"""Compile a generated module's kernels for a GPU target without a GPU.

``triton.compile`` with an ``ASTSource`` and ``GPUTarget("cuda", 90, 32)``
produces the H100/H200 binary on any machine, so code generation errors
(types, shapes, unsupported operations) show up in CI where kernels can
otherwise only run in the interpreter.
"""
from __future__ import annotations

from .autotune import candidate_configs
from .code_cache import load_module
from .triton_mode import interpret_mode


def compile_for_target(path: str, arch: int = 90, warp_size: int = 32) -> dict:
    """{kernel name: compiled kernel} for every kernel of the module at ``path``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    with interpret_mode(False):
        module = load_module(path)
    target = GPUTarget("cuda", arch, warp_size)
    out = {}
    for name, meta in module.KERNELS.items():
        config = candidate_configs(meta, interpret=False)[0]
        consts = {k: v for k, v in config.items() if k in ("XBLOCK", "RBLOCK")}
        signature = dict(meta["signature"])
        signature.update({k: "constexpr" for k in consts})
        src = ASTSource(fn=getattr(module, name), signature=signature, constexprs=consts)
        out[name] = triton.compile(src, target=target, options={"num_warps": config["num_warps"]})
    return out


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
    import os
    arch, paths = int(argv[0]), argv[1:]
    results = {}
    for path in paths:
        try:
            for name, kernel in compile_for_target(path, arch).items():
                results[f"{os.path.basename(path)}:{name}"] = "ok" if kernel.asm.get("cubin") else "no cubin"
        except Exception as error:  # report every module's failure, keep going
            results[path] = f"{type(error).__name__}: {error}"
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    import sys
    raise SystemExit(_main(sys.argv[1:]))
