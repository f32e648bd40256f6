"""Build generated C++ with the system compiler, cache the libraries on disk, load them.

A library is keyed by a hash of its source, the compiler flags, the compiler's
version and the CPU's feature flags (``-march=native`` code is only valid on a
CPU like the one that built it), and stored as ``<cache_dir>/cpp/<key>.so``
through ``cache_store``. A second process with the same source finds the file
and loads it without compiling. The library's bytes are checked against their
integrity record before ``dlopen`` (a truncated library would crash the process
with SIGBUS on its first use, a garbled one would not load): a damaged one is
compiled again, and the new file is renamed into place, never written over the
old one (which this process may have mapped).

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

from .. import cache_store, logs
from ..counters import counters
from ..errors import SurgeError

DEFAULT_CXX = "g++"

# IEEE semantics are kept: no -ffast-math (NaN/inf must propagate as in eager).
# -fno-math-errno only stops libm calls from setting errno (lets sqrt inline and
# vectorize); -fno-trapping-math lets the compiler if-convert selects, as no FP
# trap handler is ever installed. See docs/cpp_backend.md.
COMPILE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu++17",
                 "-fno-math-errno", "-fno-trapping-math", "-fno-semantic-interposition")
# On CPUs with AVX-512, GCC's default tuning still prefers 256-bit vectors (a guard
# against the clock drop of older Intel parts); 512-bit loops measured 1.6x faster
# on softmax here, as Inductor also uses 512-bit vectors there. See bench/NOTES.md.
WIDE_VECTOR_FLAGS = ("-mprefer-vector-width=512",)
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
    wide_vectors: bool = False   # the CPU has AVX-512: prefer 512-bit vectors

    @property
    def flags(self) -> tuple:
        return (COMPILE_FLAGS + (WIDE_VECTOR_FLAGS if self.wide_vectors else ())
                + (("-DSURGE_VECTOR_MATH=1",) if self.vector_math else ()))

    @property
    def libs(self) -> tuple:
        return VECTOR_MATH_LIBS if self.vector_math else ()


def _cpu_flags() -> str:
    """The CPU's feature flags line from /proc/cpuinfo (the machine's name where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    import platform
    return platform.machine()


def _cpu_fingerprint(flags: str) -> str:
    return hashlib.sha256(flags.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def find_toolchain(cxx: str | None, cache_dir: str) -> Toolchain | None:
    """The working toolchain for ``cxx`` (None: it is missing or cannot build a library).

    The probe (its version line, can it build an OpenMP library, does it have
    libmvec) runs once per compiler binary and CPU and is remembered on disk under
    the binary's path, size and mtime, so a warm process runs no compiler at all.
    """
    path = shutil.which(cxx or DEFAULT_CXX)
    if path is None:
        return None
    try:
        binary = os.stat(os.path.realpath(path))
    except OSError:
        return None
    cpu_flags = _cpu_flags()
    cpu = _cpu_fingerprint(cpu_flags)
    wide_vectors = "avx512f" in cpu_flags.split()
    identity = f"{os.path.realpath(path)}|{binary.st_size}|{binary.st_mtime_ns}|{cpu}|{COMPILE_FLAGS}|{wide_vectors}"
    probes = cache_store.store(cache_dir, "cpp")
    probe_file = f"toolchain-{hashlib.sha256(identity.encode()).hexdigest()[:24]}.json"
    try:
        known = json.loads(probes.read_bytes(probe_file) or b"")
        return Toolchain(path, known["version"], cpu, bool(known["vector_math"]), wide_vectors)
    except (ValueError, KeyError, TypeError):
        pass
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    version = (out.stdout.splitlines() or ["?"])[0]
    probe = "extern \"C\" float surge_probe(float x) { float s = 0;\n#pragma omp parallel for reduction(+:s)\n" \
            "for (int i = 0; i < 4; ++i) s += x; return s; }\n"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.cpp")
        with open(src, "w") as f:
            f.write(probe)
        # one compiler run where libmvec exists (the usual case), two where it does not
        for vector_math in (True, False):
            toolchain = Toolchain(path, version, cpu, vector_math, wide_vectors)
            if _run_compiler([path, *toolchain.flags, src, "-o", os.path.join(tmp, "p.so"), *toolchain.libs]) is None:
                break
        else:
            return None
    probes.write_bytes(probe_file, json.dumps({"vector_math": vector_math, "version": version}).encode())
    return toolchain


def _run_compiler(cmd) -> str | None:
    """None on success, else the compiler's message."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    return None if out.returncode == 0 else (out.stderr or out.stdout or f"exit {out.returncode}")


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
    libraries = cache_store.store(cache_dir, "cpp")
    stored = libraries.read_file(f"{key}.so")   # hashed before dlopen: a damaged one is rebuilt
    compiled = stored is None
    if stored is not None:
        so_path = stored[0]
    else:
        cpp_path = libraries.write_file(f"{key}.cpp", source.encode())
        if cpp_path is None:
            raise OSError(f"no folder to write the C++ source of library {key} to")
        tmp_so = libraries.temp_path(".so")
        error = _run_compiler([toolchain.cxx, *toolchain.flags, cpp_path, "-o", tmp_so, *toolchain.libs])
        if error is not None:
            os.unlink(tmp_so)
            raise CppCompileError(f"{toolchain.cxx} failed on {cpp_path}:\n{error[:4000]}")
        so_path = libraries.install_file(f"{key}.so", tmp_so)
        if so_path is None:
            raise OSError(f"no folder to write the C++ library {key} to")
        counters["cpp_compiles"] += 1
        logs.log("perf", f"compiled C++ library {key[:12]}")
    lib = ctypes.CDLL(so_path)
    _LOADED[key] = lib
    return lib, compiled
