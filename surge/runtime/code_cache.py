"""The on-disk cache of generated modules, shared across processes.

A compiled graph is one Python module (kernels + host wrapper), stored under
``<cache_dir>/graphs/<key>.py``; the key covers the graph's code, its inputs'
metadata, the versions of surge's compiler sources, torch and triton, and the
compile knobs. A second process compiling the same graph loads the module
instead of lowering, scheduling and generating code again; Triton's own cache
then finds the kernels' binaries.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import pathlib
import tempfile

import torch

_COMPILER_DIRS = ("lowering", "schedule", "codegen", "runtime")


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """Hash of the compiler's own sources: a changed compiler never reads stale code."""
    root = pathlib.Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for folder in _COMPILER_DIRS:
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(path.read_bytes())
    from .graph_cache import triton_version

    digest.update(triton_version().encode())  # read without importing triton (slow, and the cpp backend needs none)
    digest.update(torch.__version__.encode())
    return digest.hexdigest()


def _describe_input(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"T({tuple(x.shape)},{tuple(x.stride())},{x.storage_offset()},{x.dtype},{x.device})"
    return f"V({type(x).__name__}:{x!r})"


def graph_key(gm: torch.fx.GraphModule, example_inputs, constants, knobs: tuple) -> str:
    digest = hashlib.sha256()
    digest.update(compiler_fingerprint().encode())
    digest.update(gm.code.encode())
    for node in gm.graph.nodes:  # targets and literal arguments the code text may abbreviate
        digest.update(f"{node.op}|{node.target}|{node.args}|{node.kwargs}".encode())
    for x in list(example_inputs) + list(constants):
        digest.update(_describe_input(x).encode())
    digest.update(repr(knobs).encode())
    return digest.hexdigest()[:40]


def module_path(cache_dir: str, key: str) -> str:
    return os.path.join(cache_dir, "graphs", f"{key}.py")


def write_module(path: str, source: str) -> None:
    """Write atomically: a concurrent reader sees the whole file or none."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(source)
    os.replace(tmp, path)


def load_module(path: str):
    """Import a generated module from its file (Triton reads kernel source from it)."""
    name = "surge_generated_" + os.path.basename(path)[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
