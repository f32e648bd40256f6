"""Kernel files: each distinct generated kernel stored once and imported once per process.

A generated module embeds its kernels as file texts (``KERNEL_FILES``: hash of
the text -> text) and describes each call site in ``KERNELS`` (which file and
function, sizes, signature). ``load_kernels`` writes every text to
``<cache_dir>/kernels/<hash>.py`` (through ``cache_store``) unless an intact copy
of it is there, imports it once per process and binds each call-site name to
its function. Triton keys its
in-process and on-disk caches by a function's source text and its line in the
file, so equal kernels from any layer or graph are one ``JITFunction`` and one
binary. When kernels run on a GPU, the ones this process has not compiled yet are
queued right away to compile in parallel (``compile_pool``) while the caller goes
on (lowering the next graph), instead of one by one at their first launches; those whose binaries a former process kept
(``binary_cache``) are not compiled at all.
"""
from __future__ import annotations

import contextlib
import os
import types

from .. import cache_store, logs
from .triton_mode import interpreting

_MODULES: dict = {}          # (file hash, interpreting) -> the imported kernel file
_PRECOMPILE = {"enabled": True}


def _cache_root(module_file: str) -> str:
    """``<cache_dir>`` of a module stored as ``<cache_dir>/graphs/<key>.py``."""
    return os.path.dirname(os.path.dirname(os.path.abspath(module_file)))


def kernel_folder(module_file: str) -> str:
    """The folder where the kernel files of the module ``module_file`` are written."""
    return cache_store.store(_cache_root(module_file), "kernels").folder


def import_kernel_file(path: str, key: str, source: str | None = None):
    """The module of the kernel file ``path`` (named by its hash ``key``), imported once per
    process and interpreter mode (Triton fixes interpreted-or-compiled at decoration).
    Run from its text (``source``, checked by the caller; default: the file's), as
    generated modules are: no ``__pycache__`` in the cache."""
    found = _MODULES.get((key, interpreting()))
    if found is None:
        if source is None:
            with open(path) as f:
                source = f.read()
        found = types.ModuleType(f"surge_kernel_{key}")
        found.__file__ = path
        exec(compile(source, path, "exec"), found.__dict__)
        _MODULES[(key, interpreting())] = found
    return found


def _stored_kernel_file(store, key: str, text: str) -> str:
    """The path of an intact copy of the kernel file ``key``, written now if there is none."""
    found = store.read_file(f"{key}.py")
    if found is not None and found[1] == text.encode():
        return found[0]
    path = store.write_file(f"{key}.py", text.encode())
    if path is None:
        raise OSError(f"no folder to write the kernel file {key} to")
    return path


def load_kernels(files: dict, kernels: dict, module_file: str) -> dict:
    """{call-site name: kernel function} for a generated module (see the module docstring)."""
    root = _cache_root(module_file)
    store = cache_store.store(root, "kernels")
    paths = {key: _stored_kernel_file(store, key, text) for key, text in files.items()}
    functions = {name: getattr(import_kernel_file(paths[meta["file"]], meta["file"], files[meta["file"]]),
                               meta["function"])
                 for name, meta in kernels.items()}
    if _PRECOMPILE["enabled"] and not interpreting():
        _precompile(kernels, paths, root)
    return functions


def _precompile(kernels: dict, paths: dict, cache_dir: str) -> None:
    import torch

    if not torch.cuda.is_available():
        return
    from . import binary_cache, compile_pool
    from .autotune import launch_config
    try:
        device_name = torch.cuda.get_device_name()
        jobs = []
        for meta in kernels.values():
            if meta.get("symbolic"):
                # compiled at its first launch: a symbolic kernel keeps no binary record, so a
                # warm process would start workers only to find Triton's cached binary
                continue
            config = launch_config(meta, cache_dir, device_name)
            if not binary_cache.has_record(cache_dir, binary_cache.record_key(meta, config, device_name)):
                jobs.append(compile_pool.job_for(paths[meta["file"]], meta, config))
        compile_pool.submit(jobs)   # the first launch of any kernel waits for them
    except Exception as error:  # never fatal: each kernel still compiles at its first launch
        logs.log("perf", f"compiling kernels ahead of launch failed, they compile at launch: "
                         f"{type(error).__name__}: {error}")


@contextlib.contextmanager
def no_precompile():
    """Load modules without compiling their kernels for this process's GPU (a caller that
    compiles them for another target)."""
    old = _PRECOMPILE["enabled"]
    _PRECOMPILE["enabled"] = False
    try:
        yield
    finally:
        _PRECOMPILE["enabled"] = old
