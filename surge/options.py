"""One typed options object, passed down through every layer.

Values come from three places, later ones winning: the defaults below, ``SURGE_*``
environment variables, and the ``options=`` dict (plus the keyword arguments) of
``surge.compile``. Nothing deep inside surge reads the environment itself: it is
read here, once per ``surge.compile`` call, so a test can change it between calls.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Mapping


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() not in ("0", "false", "no", "off")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def _env_optional_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else None


def _env_str(name: str, default: str | None) -> str | None:
    raw = os.environ.get(name)
    return raw if raw not in (None, "") else default


@dataclasses.dataclass(frozen=True)
class Options:
    # What the user asked for through surge.compile's keywords.
    backend: Any = None
    fullgraph: bool = False
    dynamic: bool | None = None
    mode: str | None = None

    # Recompiles of one code object before surge gives up and runs it eagerly.
    cache_size_limit: int = 8
    # Random ops produce results bit-identical to eager under the same seed.
    fallback_random: bool = False
    # Write every compile's artifacts into one folder per compiled graph here.
    debug_dir: str | None = None
    # Where compiled kernels and autotuning results live across processes.
    cache_dir: str | None = None
    # Raise surge's own internal errors instead of falling back to eager
    # (for developing surge; users want the fallback).
    raise_internal_errors: bool = False
    # Print one warning per code object that runs eagerly for a reason other than a
    # graph break (fallbacks.py); SURGE_LOGS=-fallbacks silences it too.
    warn_fallbacks: bool = True
    # Reuse whole compiled graphs (aot, lowering, codegen results) from the disk
    # cache across processes; off to debug those layers.
    graph_cache: bool = True
    # Reuse captures (guards, entry code, graph) from the disk cache across
    # processes: a new process skips capture for frames it has seen.
    frontend_cache: bool = True
    # A reduction of at least this many elements per row over few rows is split in two
    # kernels (partials, then their combination) so that it fills the machine.
    split_reduction_min_elements: int = 65536
    # 16-bit matmuls whose sizes are not multiples of 8 run on zero-padded operands
    # (cuBLAS is several times slower on misaligned rows); None: on CUDA only.
    pad_matmuls: bool | None = None
    # The C++ compiler of the cpp backend; None: ``g++``.
    cxx: str | None = None
    # Kernel compile worker processes at most; None: one fewer than the CPUs (at most 31).
    compile_workers: int | None = None
    # A status line for a compile still running after a few seconds, on an interactive
    # terminal only (observe/progress.py).
    progress: bool = True

    @staticmethod
    def from_env() -> "Options":
        return Options(
            cache_size_limit=_env_int("SURGE_CACHE_SIZE_LIMIT", 8),
            fallback_random=_env_bool("SURGE_FALLBACK_RANDOM", False),
            debug_dir=_env_str("SURGE_DEBUG_DIR", None),
            cache_dir=_env_str("SURGE_CACHE_DIR", None),
            raise_internal_errors=_env_bool("SURGE_RAISE_INTERNAL_ERRORS", False),
            warn_fallbacks=_env_bool("SURGE_WARN_FALLBACKS", True),
            graph_cache=_env_bool("SURGE_GRAPH_CACHE", True),
            frontend_cache=_env_bool("SURGE_FRONTEND_CACHE", True),
            split_reduction_min_elements=_env_int("SURGE_SPLIT_REDUCTION_MIN_ELEMENTS", 65536),
            pad_matmuls=_env_bool("SURGE_PAD_MATMULS", None),
            cxx=_env_str("SURGE_CXX", None),
            compile_workers=_env_optional_int("SURGE_COMPILE_WORKERS"),
            progress=_env_str("SURGE_PROGRESS", None) != "0",
        )

    def replace(self, **changes: Any) -> "Options":
        return dataclasses.replace(self, **changes)

    def with_user_options(self, user: Mapping[str, Any] | None) -> "Options":
        """Apply an ``options=`` dict; unknown keys are an error, not ignored."""
        if not user:
            return self
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(user) - known)
        if unknown:
            raise ValueError(
                f"surge.compile: unknown option(s) {unknown}; known options are {sorted(known)}"
            )
        return dataclasses.replace(self, **dict(user))


def log_channels_setting() -> str:
    """``SURGE_LOGS`` as set now. Read on each log call, not once per ``surge.compile``:
    users and tests flip it between calls; ``logs.py`` parses it once per change."""
    return os.environ.get("SURGE_LOGS", "")


def triton_interpret_setting() -> bool:
    """``TRITON_INTERPRET``: whether Triton runs kernels in its interpreter, for a Triton
    without ``triton.knobs`` (which otherwise holds the setting)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@contextlib.contextmanager
def environment_override(name: str, value: str):
    """``os.environ[name] = value`` inside the block, the previous state after it: for a
    library that reads its own switch from the environment (Triton's ``TRITON_INTERPRET``)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def default_cache_dir(options: Options) -> str:
    if options.cache_dir:
        return options.cache_dir
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "surge")
