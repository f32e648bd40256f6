"""The dtype sweep: the OpInfo ops of ``test_opinfo_sweep`` over every dtype surge stores.

Each (op, dtype) case takes the op's first small OpInfo sample in that dtype, traces it
through surge's aot layer, compiles it with a backend (Triton in its interpreter, or C++)
and compares with eager: integers and bools exactly, floats within a tolerance that
allows for fp16/bf16 being computed in fp32 (eager rounds after every op of a
decomposed composite).

CI runs a sampled subset: ``CI_CASES_PER_DTYPE`` ops per dtype, chosen by a stable hash
of the op's name, so each dtype meets a different fixed mix of ops. With
``SURGE_DTYPE_SWEEP=full`` the tests run every case (slow: minutes per dtype in the
Triton interpreter). ``python -m tests.backend.dtype_sweep triton|cpp [dtype ...]``
runs every case (three samples each, as the full tests do) and prints one line per failure.
"""
from __future__ import annotations

import hashlib
import os

import torch

if __name__ == "__main__" and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before anything imports triton
from torch.utils import _pytree as pytree

from .test_opinfo_sweep import MAX_NUMEL, OPS, VIEW_OPS, _graph_of

# float32 is the OpInfo sweep's own dtype; these are the others surge stores
DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
          torch.float16, torch.bfloat16, torch.float64)
CI_CASES_PER_DTYPE = 8
FULL = os.environ.get("SURGE_DTYPE_SWEEP", "") == "full"
SAMPLES = 3 if FULL else 1   # OpInfo samples per case

# fp16/bf16: surge computes a decomposed composite (softmax, layer_norm, gelu) in fp32
# throughout, eager rounds to the narrow type after each of its ops
TOLERANCES = {torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
              torch.float64: dict(rtol=1e-7, atol=1e-7)}


def short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def supports(op, dtype: torch.dtype) -> bool:
    return dtype in op.supported_dtypes("cpu")


def small_samples(op, dtype: torch.dtype, count: int, device: str = "cpu") -> list:
    """Up to ``count`` OpInfo samples of the op in ``dtype`` whose tensors are small and
    non-empty, those without 0-d tensors first (some lowerings leave 0-d ones to ATen
    on purpose)."""
    found = []
    try:
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            leaves = [x for x in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
                      if isinstance(x, torch.Tensor)]
            if leaves and all(0 < x.numel() <= MAX_NUMEL for x in leaves):
                found.append((any(x.ndim == 0 for x in leaves), len(found), sample))
            if sum(1 for zero_d, _, _ in found if not zero_d) >= count:
                break
    except Exception:  # noqa: BLE001 - OpInfo has no sample generator for this dtype
        pass
    return [sample for _, _, sample in sorted(found, key=lambda f: f[:2])[:count]]


def _rank(name: str, dtype: torch.dtype) -> int:
    return int.from_bytes(hashlib.sha256(f"{name}/{short(dtype)}".encode()).digest()[:4], "little")


def cases(full: bool = FULL) -> list:
    """(op name, dtype) pairs the op supports: all of them, or CI's sampled subset."""
    out = []
    for dtype in DTYPES:
        names = sorted((n for n in OPS if supports(OPS[n], dtype)), key=lambda n: _rank(n, dtype))
        out.extend((n, dtype) for n in (names if full else names[:CI_CASES_PER_DTYPE]))
    return sorted(out, key=lambda c: (short(c[1]), c[0]))


def case_id(case) -> str:
    return f"{case[0]}-{short(case[1])}"


def assert_same(actual, expected, dtype: torch.dtype) -> None:
    a_flat, e_flat = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    assert len(a_flat) == len(e_flat)
    for a, e in zip(a_flat, e_flat):
        if not isinstance(e, torch.Tensor):
            assert a == e
            continue
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, e.dtype, a.shape, e.shape)
        tol = TOLERANCES.get(e.dtype, TOLERANCES.get(dtype, {})) if e.dtype.is_floating_point \
            else dict(rtol=0, atol=0)
        torch.testing.assert_close(a, e, equal_nan=True, **tol)


def trace(name: str, dtype: torch.dtype, compiler, device: str = "cpu") -> list:
    """[(graph, inputs, compiled)] of the case's samples on ``device``, ``compiler`` as the
    aot layer's forward compiler; empty when there is no small sample. The aot layer's
    errors propagate."""
    from surge.aot import aot_compile
    from surge.options import Options

    options = Options(raise_internal_errors=True, cache_dir=os.environ.get("SURGE_CACHE_DIR"))
    runs = []
    for sample in small_samples(OPS[name], dtype, SAMPLES, device):
        gm, inputs = _graph_of(OPS[name], sample)
        runs.append((gm, inputs, aot_compile(gm, inputs, fw_compiler=compiler, bw_compiler=compiler,
                                             options=options)))
    return runs


# (op, dtype kind) cases that run as ATen ops on purpose, and why
ATEN_ON_PURPOSE = {
    ("pow", "int"): "an integer power with a tensor exponent (negative exponents, overflow) runs in ATen",
}


def expects_kernel(name: str, dtype: torch.dtype, expected) -> bool:
    """A kernel is made unless the op is a view, runs in ATen on purpose, or has only
    empty results (``repeat`` by 0)."""
    kind = "int" if not dtype.is_floating_point and dtype != torch.bool else "other"
    tensors = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    return name not in VIEW_OPS and (name, kind) not in ATEN_ON_PURPOSE and any(t.numel() for t in tensors)


class Deferred:
    """What the aot layer gets as a compiled graph when C++ graphs are built together:
    bound to the built graph after the one compiler run (``build_cpp``)."""

    def __init__(self, aten_gm, inputs):
        self.aten_gm, self.inputs, self.compiled = aten_gm, list(inputs), None

    def __call__(self, *args):
        return self.compiled(*args)


def build_cpp(chosen) -> dict:
    """Every case of ``chosen`` through the aot layer and the cpp backend, built as one
    library: case -> ("ok", [(gm, inputs, compiled)], [Deferred]) or ("skip"|"error", why)."""
    from surge.backends.cpp import compile_aten_graphs_cpp
    from surge.codegen.cpp.host import generate_host_module
    from surge.codegen.cpp.module import generate_cpp_module
    from surge.lowering.lower import lower_graph
    from surge.schedule import schedule_graph

    results, pending = {}, []
    for case in chosen:
        made = []

        def compiler(aten_gm, example_inputs, made=made):
            made.append(Deferred(aten_gm, example_inputs))
            return made[-1]
        try:
            found = trace(*case, compiler)
        except Exception as error:  # noqa: BLE001 - the aot layer's limits are its tests' business
            results[case] = ("skip", f"aot layer: {type(error).__name__}: {error}"[:200])
            continue
        if not found:
            results[case] = ("skip", "no small sample")
            continue
        try:   # a generation error fails this case, not the whole library
            for d in made:
                graph, _ = lower_graph(d.aten_gm, d.inputs)
                schedule = schedule_graph(graph)
                generate_host_module(schedule, generate_cpp_module(schedule))
        except Exception as error:  # noqa: BLE001
            results[case] = ("error", f"{type(error).__name__}: {error}"[:500])
            continue
        results[case] = ("ok", found, made)
        pending.extend(made)
    built = compile_aten_graphs_cpp([(d.aten_gm, d.inputs) for d in pending])
    for d, c in zip(pending, built):
        d.compiled = c
    return results


def _run_all(backend: str, dtypes) -> None:
    from surge.backends.triton import compile_aten_graph
    from surge.options import Options

    chosen = [c for c in cases(full=True) if c[1] in dtypes]
    if backend == "cpp":
        built = build_cpp(chosen)
    else:
        options = Options(raise_internal_errors=True, cache_dir=os.environ.get("SURGE_CACHE_DIR"))
        built = {}
        for case in chosen:
            made = []
            try:
                found = trace(*case, lambda g, i, made=made: made.append(compile_aten_graph(g, i, options))
                              or made[-1])
                built[case] = ("ok", found, made) if found else ("skip", "no small sample")
            except Exception as error:  # noqa: BLE001 - one line per failing case
                built[case] = ("error", f"{type(error).__name__}: {error}"[:300])
    failures = 0
    for case, result in built.items():
        if result[0] == "error":
            print(f"ERROR {case_id(case)}: {result[1]!r}", flush=True)
            failures += 1
        elif result[0] == "ok":
            kernels = sum(len(getattr(m, "compiled", m).kernel_names) for m in result[2])
            gm, inputs, _ = result[1][0]
            if expects_kernel(case[0], case[1], [g(*i) for g, i, _ in result[1]]) and not kernels:
                print(f"NO KERNEL {case_id(case)}", flush=True)
                failures += 1
            for gm, inputs, compiled in result[1]:
                try:
                    assert_same(compiled(*inputs), gm(*inputs), case[1])
                except Exception as error:  # noqa: BLE001
                    print(f"MISMATCH {case_id(case)}: {str(error).splitlines()[:3]}", flush=True)
                    failures += 1
    print(f"{failures} failures in {len(built)} cases", flush=True)


if __name__ == "__main__":
    import sys

    SAMPLES = 3
    chosen = [getattr(torch, d) for d in sys.argv[2:]] or list(DTYPES)
    _run_all(sys.argv[1], chosen)
