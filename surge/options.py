"""One typed options object, passed down through every layer.

Values come from three places, later ones winning: the defaults below, ``SURGE_*``
environment variables, and the ``options=`` dict (plus the keyword arguments) of
``surge.compile``. Nothing deep inside surge reads the environment itself: it is
read here, once per ``surge.compile`` call, so a test can change it between calls.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import sys
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


def _dynamo_config(name: str) -> bool:
    """``torch._dynamo.config.<name>`` when code written for torch.compile set it: read only
    if that module is already imported (surge never imports Dynamo)."""
    config = sys.modules.get("torch._dynamo.config")
    return bool(getattr(config, name, False)) if config is not None else False


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
    # The C++ compiler of the cpp backend (and of the entries' tensor checks); None: ``g++``.
    cxx: str | None = None
    # Cache entries check their tensors in one C++ call (frontend/native_checks.py), built
    # once per machine; off: in Python, one check per tensor.
    native_checks: bool = True
    # Kernel compile worker processes at most; None: one fewer than the CPUs (at most 31).
    compile_workers: int | None = None
    # A status line for a compile still running after a few seconds, on an interactive
    # terminal only (observe/progress.py).
    progress: bool = True
    # A reduction whose row fits in one tile of at most this many elements is reduced
    # without a loop (Triton's persistent reductions).
    persistent_reduction_limit: int = 8192
    # Time each Triton kernel's candidate launch configs on its first call and store the
    # winner on disk (a stored winner is used whether or not this is on).
    autotune: bool = False
    # Record each compiled graph on CUDA tensors into a CUDA graph and replay it
    # (``mode="reduce-overhead"``; backends/cudagraphs.py).
    cudagraphs: bool = False
    # Graphs recorded per compiled graph's memory pool (its forward, backward and the
    # graphs of several sizes) before further ones run in the default mode.
    cudagraph_max_records: int = 8
    # Values read back from tensors (``.item()``, ``.tolist()``, ``int(t)``, ``float(t)``)
    # stay in the graph as data-dependent numbers where they only meet arithmetic, as
    # torch's ``capture_scalar_outputs``; off: each read breaks the graph.
    capture_scalar_outputs: bool = False
    # Ops whose output size depends on data (``nonzero``, ``x[mask]``) stay in the graph
    # under a data-dependent size, as torch's ``capture_dynamic_output_shape_ops``;
    # off: they break the graph.
    capture_dynamic_output_shape_ops: bool = False

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
            native_checks=_env_bool("SURGE_NATIVE_CHECKS", True),
            compile_workers=_env_optional_int("SURGE_COMPILE_WORKERS"),
            progress=_env_str("SURGE_PROGRESS", None) != "0",
            persistent_reduction_limit=_env_int("SURGE_PERSISTENT_REDUCTION_LIMIT", 8192),
            autotune=_env_bool("SURGE_AUTOTUNE", False),
            cudagraphs=_env_bool("SURGE_CUDAGRAPHS", False),
            cudagraph_max_records=_env_int("SURGE_CUDAGRAPH_MAX_RECORDS", 8),
            capture_scalar_outputs=_env_bool("SURGE_CAPTURE_SCALAR_OUTPUTS", False)
            or _dynamo_config("capture_scalar_outputs"),
            capture_dynamic_output_shape_ops=_env_bool("SURGE_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS", False)
            or _dynamo_config("capture_dynamic_output_shape_ops"),
        )

    def replace(self, **changes: Any) -> "Options":
        return dataclasses.replace(self, **changes)

    def with_mode(self) -> "Options":
        """The options ``mode`` turns on (``MODES``), over what was set otherwise."""
        turned_on = MODES.get(self.mode or "default", {})
        return dataclasses.replace(self, **turned_on) if turned_on else self

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


# What each ``mode`` of ``surge.compile`` turns on (as torch.compile's modes do).
MODES: dict[str, dict] = {
    "default": {},
    "reduce-overhead": {"cudagraphs": True},
    "max-autotune": {"autotune": True, "cudagraphs": True},
    "max-autotune-no-cudagraphs": {"autotune": True},
}


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


@dataclasses.dataclass(frozen=True)
class CompileConfig:
    """What the backend stages (lowering, schedule, codegen, runtime) need of the options.

    One object, derived from ``Options`` and passed down explicitly. The fields above the
    line change what a compile produces and all feed ``cache_key()``, the one key part
    every cache of compiled code uses; the fields below it do not (where files go, what is
    reported), so changing them reuses cached code."""
    # -- fields that change the compiled code (each one is in cache_key)
    split_reduction_min_elements: int = 65536
    pad_matmuls: bool | None = None       # None: the Target decides
    persistent_reduction_limit: int = 8192
    autotune: bool = False
    fallback_random: bool = False
    # -- fields that do not
    # a config made directly (a test, a bench script) caches where a compile would, never in
    # the working directory
    cache_dir: str = dataclasses.field(default_factory=lambda: default_cache_dir(Options.from_env()))
    debug_dir: str | None = None
    graph_cache: bool = True
    raise_internal_errors: bool = False
    warn_fallbacks: bool = True
    cxx: str | None = None                # the toolchain it names is part of the cpp Target's key
    compile_workers: int | None = None    # Triton's compile processes at most
    progress: bool = True                 # a status line for long compiles
    cudagraphs: bool = False              # record CUDA graphs around Executables (runs the same code)
    cudagraph_max_records: int = 8

    @staticmethod
    def from_options(options: "Options") -> "CompileConfig":
        return CompileConfig(
            split_reduction_min_elements=options.split_reduction_min_elements,
            pad_matmuls=options.pad_matmuls,
            persistent_reduction_limit=options.persistent_reduction_limit,
            autotune=options.autotune,
            fallback_random=options.fallback_random,
            cache_dir=default_cache_dir(options),
            debug_dir=options.debug_dir,
            graph_cache=options.graph_cache,
            raise_internal_errors=options.raise_internal_errors,
            warn_fallbacks=options.warn_fallbacks,
            cxx=options.cxx,
            compile_workers=options.compile_workers,
            progress=options.progress,
            cudagraphs=options.cudagraphs,
            cudagraph_max_records=options.cudagraph_max_records,
        )

    def replace(self, **changes: Any) -> "CompileConfig":
        return dataclasses.replace(self, **changes)

    def cache_key(self, target=None) -> str:
        """A hash of every field that changes the compiled code, and of the ``Target``'s
        decisions when one is given: two compiles share cached code only when it is equal."""
        parts = [f"{name}={getattr(self, name)!r}" for name in code_fields()]
        if target is not None:
            parts.append(target.cache_key())
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


# The fields of ``CompileConfig`` that do not change compiled code (not in ``cache_key``).
NON_CODE_FIELDS = frozenset({"cache_dir", "debug_dir", "graph_cache", "raise_internal_errors", "warn_fallbacks",
                             "cxx", "compile_workers", "progress", "cudagraphs", "cudagraph_max_records"})


def code_fields() -> tuple:
    """The names of ``CompileConfig``'s fields that change compiled code, in field order."""
    return tuple(f.name for f in dataclasses.fields(CompileConfig) if f.name not in NON_CODE_FIELDS)
