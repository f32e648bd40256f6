"""Compiled kernel binaries kept in surge's cache and loaded without Triton's compiler.

Triton finds a compiled kernel in its own on-disk cache by a key that includes a
hash of Triton's installation, which every process computes once by reading all
of Triton's sources and its shared library: about 0.4 s of a warm process's first
call on an H200 machine, more than all of surge's own warm work for a small
graph. So the first launch of each kernel also stores what its binary is made
of (the binary, Triton's metadata of it, and the argument signature and
constants its launcher is built from) under ``<cache_dir>/binaries/<key>/``; a
later process builds the compiled kernel straight from those files and launches
it through the compiled binary (``launcher.direct_launch``), so it never asks
Triton to compile.

The key holds everything the binary was specialized on: the kernel file and
function, pointer dtypes, the size arguments' specialization (1, multiples of
16, 64-bit), the launch config, the device, the Triton version and the
environment variables Triton's own cache key holds. The folder is written and read through
``cache_store`` (renamed into place whole, with a manifest of its files' hashes
checked before Triton reads them; a damaged record is compiled again and
replaced). Pointer
alignment is the one specialization the key cannot know before a launch: only
binaries compiled for 16-byte-aligned pointers are stored, and one is loaded
only for a launch whose pointers are all aligned. Anything unexpected (another
Triton's compiled-kernel interface, a missing file) means no record: the launch
goes through Triton as before.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import pickle
import types

from .. import cache_store, logs
from ..counters import counters

SOURCE_FILE = "source.pkl"


def _compiled_kernel_class():
    """Triton's ``CompiledKernel`` when its constructor is the one this module builds on."""
    try:
        from triton.compiler.compiler import CompiledKernel
    except ImportError:
        return None
    try:
        params = list(inspect.signature(CompiledKernel.__init__).parameters)
    except (TypeError, ValueError):
        return None
    return CompiledKernel if params == ["self", "src", "metadata_group", "hash"] else None


def _compile_environment() -> list:
    """The environment variables Triton's own cache key holds (they change what it compiles)."""
    try:
        from triton.compiler.compiler import get_cache_invalidating_env_vars
    except ImportError:
        return []
    return sorted((str(k), str(v)) for k, v in get_cache_invalidating_env_vars().items())


def record_key(meta: dict, config: dict, device_name: str) -> str:
    """The key of one kernel's binary: body, specialization, config, device, Triton and the
    environment variables that change what it compiles."""
    import triton

    sizes = (meta["xnumel"], meta["rnumel"]) if meta["reduction"] else (meta["xnumel"],)
    specialization = tuple((s == 1, s % 16 == 0, s >= 2**31) for s in sizes)
    text = json.dumps([meta.get("file"), meta["function"], sorted(meta["signature"].items()),
                       specialization, sorted(config.items()), device_name, triton.__version__,
                       _compile_environment()])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _store(cache_dir: str):
    return cache_store.store(cache_dir, "binaries")


def has_record(cache_dir: str, key: str) -> bool:
    """A record is there (its files are checked when it is loaded)."""
    return _store(cache_dir).read_bytes(os.path.join(key, cache_store.MANIFEST)) is not None


def store(cache_dir: str, key: str, compiled) -> bool:
    """Keep ``compiled``'s binary and launcher description under ``key``; False if it cannot."""
    try:
        group = dict(compiled.metadata_group)
        src = compiled.src
        binary_ext = _binary_ext(compiled)
        wanted = {name: path for name, path in group.items()
                  if name.endswith(".json") or name.endswith("." + binary_ext)}
        if not any(n.endswith(".json") for n in wanted) or len(wanted) < 2:
            return False
        description = dict(hash=compiled.hash, files=sorted(wanted), signature=dict(src.signature),
                           constants=dict(getattr(src, "constants", {}) or {}))
        files = {}
        for name, path in wanted.items():
            with open(path, "rb") as f:
                files[name] = f.read()
        files[SOURCE_FILE] = pickle.dumps(description)
        return _store(cache_dir).write_folder(key, files) is not None
    except Exception as error:  # never fatal: the next process compiles through Triton
        logs.log("perf", f"could not keep a kernel binary: {type(error).__name__}: {error}")
        return False


def _binary_ext(compiled) -> str:
    from triton.compiler.compiler import make_backend

    return make_backend(compiled.metadata.target).binary_ext


# (cache dir, key) -> the compiled kernel loaded in this process: call sites of one kernel
# (a model's layers) share it, and the GPU module it loads (a few ms each).
_LOADED: dict = {}


def load(cache_dir: str, key: str, kernel):
    """Triton's compiled kernel for ``kernel`` (a ``JITFunction``) from the record ``key``, or None.
    The key names the kernel's file and function, so every call site with that key has the
    same ``kernel`` and shares one compiled kernel."""
    cls = _compiled_kernel_class()
    if cls is None or not has_record(cache_dir, key):
        return None
    found = _LOADED.get((cache_dir, key))
    if found is not None and found.src.fn is kernel:
        counters["binary_cache_hits"] += 1
        return found
    files = _store(cache_dir).read_folder(key)   # every file checked against the manifest
    if files is None:
        return None
    try:
        description = pickle.loads(files[SOURCE_FILE][1])
        # What Triton's launcher reads of the kernel's source: its function (for argument
        # names), signature and constants.
        source = types.SimpleNamespace(fn=kernel, signature=description["signature"],
                                       constants=description["constants"])
        group = {name: files[name][0] for name in description["files"]}
        compiled = cls(source, group, description["hash"])
    except Exception as error:
        logs.log("perf", f"kernel binary {key} not loaded: {type(error).__name__}: {error}")
        return None
    counters["binary_cache_hits"] += 1
    _LOADED[(cache_dir, key)] = compiled
    return compiled
