"""Build generated C++ with the system compiler, cache the libraries on disk, load them.

A library is keyed by a hash of its source, the compiler flags, the compiler's
version and the CPU's feature flags (``-march=native`` code is only valid on a
CPU like the one that built it), and stored as ``<cache_dir>/cpp/<key>.so``. A
second process with the same source finds the file and loads it without
compiling. Files are written to a temporary name in the same folder and
renamed into place, so concurrent processes never see half a library.

Which compiler to use is the caller's choice (``SURGE_CXX`` at the backend
entry, default ``g++``); ``find_toolchain`` says whether it works here.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

from .. import logs
from ..counters import counters
from ..errors import SurgeError

DEFAULT_CXX = "g++"

# IEEE semantics are kept: no -ffast-math (NaN/inf must propagate as in eager).
# -fno-math-errno only stops libm calls from setting errno (lets sqrt inline and
# vectorize); -fno-trapping-math lets the compiler if-convert selects, as no FP
# trap handler is ever installed. See docs/cpp_backend.md.
COMPILE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu++17",
                 "-fno-math-errno", "-fno-trapping-math", "-fno-semantic-interposition")
# glibc's vector math library: SIMD variants of expf, tanhf, erff, ...
VECTOR_MATH_LIBS = ("-lmvec",)
COMPILE_TIMEOUT_S = 300


class CppCompileError(SurgeError):
    """The C++ compiler rejected generated code (a bug in surge's code generator)."""


@dataclasses.dataclass(frozen=True)
class Toolchain:
    cxx: str              # path of the compiler
    version: str          # first line of ``cxx --version``
    cpu: str              # hash of the CPU's feature flags
    vector_math: bool     # links glibc's libmvec

    @property
    def flags(self) -> tuple:
        return COMPILE_FLAGS + (("-DSURGE_VECTOR_MATH=1",) if self.vector_math else ())

    @property
    def libs(self) -> tuple:
        return VECTOR_MATH_LIBS if self.vector_math else ()


def _cpu_fingerprint() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return hashlib.sha256(line.encode()).hexdigest()[:16]
    except OSError:
        pass
    import platform
    return hashlib.sha256(platform.machine().encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def find_toolchain(cxx: str | None, cache_dir: str) -> Toolchain | None:
    """The working toolchain for ``cxx`` (None: it is missing or cannot build a library).

    The probe (can it build an OpenMP library, does it have libmvec) runs once per
    compiler version and is remembered on disk, so a warm process only runs
    ``cxx --version``.
    """
    path = shutil.which(cxx or DEFAULT_CXX)
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    version = (out.stdout.splitlines() or ["?"])[0]
    cpu = _cpu_fingerprint()
    probe_key = hashlib.sha256(f"{path}|{version}|{cpu}|{COMPILE_FLAGS}".encode()).hexdigest()[:24]
    probe_file = os.path.join(cache_dir, "cpp", f"toolchain-{probe_key}.json")
    try:
        with open(probe_file) as f:
            return Toolchain(path, version, cpu, bool(json.load(f)["vector_math"]))
    except (OSError, ValueError, KeyError):
        pass
    probe = "extern \"C\" float surge_probe(float x) { float s = 0;\n#pragma omp parallel for reduction(+:s)\n" \
            "for (int i = 0; i < 4; ++i) s += x; return s; }\n"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.cpp")
        with open(src, "w") as f:
            f.write(probe)
        # one compiler run where libmvec exists (the usual case), two where it does not
        for vector_math in (True, False):
            libs = VECTOR_MATH_LIBS if vector_math else ()
            if _run_compiler([path, *COMPILE_FLAGS, src, "-o", os.path.join(tmp, "p.so"), *libs]) is None:
                break
        else:
            return None
    _write_atomic(probe_file, json.dumps({"vector_math": vector_math, "version": version}).encode())
    return Toolchain(path, version, cpu, vector_math)


def _run_compiler(cmd) -> str | None:
    """None on success, else the compiler's message."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    return None if out.returncode == 0 else (out.stderr or out.stdout or f"exit {out.returncode}")


def _write_atomic(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def library_key(source: str, toolchain: Toolchain) -> str:
    digest = hashlib.sha256()
    for part in (source, " ".join(toolchain.flags + toolchain.libs), toolchain.version, toolchain.cpu):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:40]


_LOADED: dict[str, ctypes.CDLL] = {}


def load_library(source: str, toolchain: Toolchain, cache_dir: str) -> tuple:
    """(ctypes library, compiled_now) for ``source``: from memory, the disk cache, or g++."""
    key = library_key(source, toolchain)
    lib = _LOADED.get(key)
    if lib is not None:
        return lib, False
    folder = os.path.join(cache_dir, "cpp")
    so_path = os.path.join(folder, f"{key}.so")
    compiled = False
    if not os.path.exists(so_path):
        cpp_path = os.path.join(folder, f"{key}.cpp")
        _write_atomic(cpp_path, source.encode())
        fd, tmp_so = tempfile.mkstemp(dir=folder, suffix=".so.tmp")
        os.close(fd)
        error = _run_compiler([toolchain.cxx, *toolchain.flags, cpp_path, "-o", tmp_so, *toolchain.libs])
        if error is not None:
            os.unlink(tmp_so)
            raise CppCompileError(f"{toolchain.cxx} failed on {cpp_path}:\n{error[:4000]}")
        os.replace(tmp_so, so_path)
        compiled = True
        counters["cpp_compiles"] += 1
        logs.log("perf", f"compiled C++ library {key[:12]}")
    lib = ctypes.CDLL(so_path)
    _LOADED[key] = lib
    return lib, compiled
