"""The on-disk cache of generated modules, shared across processes.

A compiled graph is one Python module (kernels + host wrapper), stored under
``<cache_dir>/graphs/<key>.py`` (the cpp backend's host modules: ``cpp_graphs/``);
the key covers the graph's code, its inputs' metadata, the versions of surge's
compiler sources, torch and triton, and the compile knobs. A second process
compiling the same graph loads the module instead of lowering, scheduling and
generating code again; Triton's own cache then finds the kernels' binaries.

Modules are stored and checked through ``cache_store`` (a damaged one is
generated again) and run from the checked text: importlib's loader would also
write and trust an unchecked ``__pycache__`` in the cache.
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
import types

import torch

from .. import cache_store

# surge's folders whose sources shape a generated module (the driver's too: it picks
# the target's decisions and writers).
_COMPILER_DIRS = ("lowering", "schedule", "codegen", "runtime", "backends")


@functools.lru_cache(maxsize=1)
def triton_version() -> str:
    """From the installed package's metadata, without importing triton (slow, and cpp needs
    none): the same answer whether or not triton is imported."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton")
    except PackageNotFoundError:
        triton = sys.modules.get("triton")  # importable without package metadata (a source tree)
        return getattr(triton, "__version__", "none") if triton is not None else "none"


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """Hash of the compiler's own sources: a changed compiler never reads stale code."""
    return cache_store.sources_fingerprint(_COMPILER_DIRS, f"{torch.__version__} {triton_version()}")


def _describe_input(x, sizes) -> str:
    """An input's metadata. With symbolic sizes (``sizes``, a ``SizeVars``), by their
    symbolic form (symbols named in order of appearance), not by the example's values: a
    process compiling the graph for sizes in the same ranges finds the same module, whose
    size decisions hold for every size in range or are guarded in it."""
    if isinstance(x, torch.Tensor):
        if sizes is None:
            return f"T({tuple(x.shape)},{tuple(x.stride())},{x.storage_offset()},{x.dtype},{x.device})"
        shape, stride = sizes.shape(x.shape), sizes.shape(x.stride())
        return f"T({shape},{stride},{sizes.expr(x.storage_offset())},{x.dtype},{x.device})"
    if _is_symbolic(x):   # a SymInt argument
        return f"S({sizes.expr(x)})"
    return f"V({type(x).__name__}:{x!r})"


def _is_symbolic(x) -> bool:
    if isinstance(x, torch.Tensor):
        return any(not isinstance(v, int) for v in (*x.shape, *x.stride(), x.storage_offset()))
    return getattr(getattr(x, "node", None), "expr", None) is not None


def graph_key(gm: torch.fx.GraphModule, example_inputs, constants, knobs: tuple) -> str:
    digest = hashlib.sha256()
    digest.update(compiler_fingerprint().encode())
    digest.update(gm.code.encode())
    for node in gm.graph.nodes:  # targets and literal arguments the code text may abbreviate
        digest.update(f"{node.op}|{node.target}|{node.args}|{node.kwargs}".encode())
    sizes = None
    if any(_is_symbolic(x) for x in example_inputs):   # (sympy is not imported for static graphs)
        from ..lowering.size_vars import SizeVars
        sizes = SizeVars()
    for x in list(example_inputs) + list(constants):
        digest.update(_describe_input(x, sizes).encode())
    for s in sizes.symbols if sizes is not None else ():   # the ranges decide which guards it has
        digest.update(f"{s}:{sizes.lower[s]}:{sizes.upper.get(s)}".encode())
    digest.update(repr(knobs).encode())
    return digest.hexdigest()[:40]


def read_module(cache_dir: str, kind: str, key: str) -> tuple | None:
    """(path, source) of the intact stored module ``key`` of the cache ``kind``, or None."""
    found = cache_store.store(cache_dir, kind).read_file(f"{key}.py")
    return None if found is None else (found[0], found[1].decode())


def write_module(cache_dir: str, kind: str, key: str, source: str) -> str:
    """Store a module's source; its path (a private file when the cache cannot be written)."""
    path = cache_store.store(cache_dir, kind).write_file(f"{key}.py", source.encode())
    if path is None:
        raise OSError(f"no folder to write the generated module {key} to")
    return path


def load_module(path: str, source: str | None = None):
    """Run a generated module's ``source`` (checked by the caller; default: the file's text)
    as the module of file ``path``, where Triton reads kernel source from."""
    if source is None:
        with open(path) as f:
            source = f.read()
    module = types.ModuleType("surge_generated_" + os.path.basename(path)[:-3])
    module.__file__ = path
    exec(compile(source, path, "exec"), module.__dict__)
    return module
