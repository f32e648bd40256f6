"""The dtype sweep through the Triton backend: a sampled subset of (op, dtype) cases in CI,
all of them with ``SURGE_DTYPE_SWEEP=full`` (``dtype_sweep.py`` says how they are chosen).
Samples live on the GPU where there is one (compiled kernels), else on the CPU (the
interpreter)."""
import pytest

from surge.backends.triton import compile_aten_graph

from .dtype_sweep import assert_same, case_id, cases, expects_kernel, trace
from .helpers import DEVICE


@pytest.mark.parametrize("case", cases(), ids=case_id)
def test_op_matches_eager_in_dtype(case):
    from surge.options import Options

    made, backend_errors = [], []

    def compiler(aten_gm, example_inputs):
        try:
            made.append(compile_aten_graph(aten_gm, example_inputs, Options(raise_internal_errors=True)))
        except Exception as error:  # this backend's failure fails the test, never skips it
            backend_errors.append(error)
            raise
        return made[-1]
    try:
        found = trace(*case, compiler, device=DEVICE)
    except Exception as error:  # the aot layer's own limits are its tests' business
        if backend_errors:
            raise backend_errors[0]
        pytest.skip(f"aot layer: {type(error).__name__}: {error}"[:200])
    if not found:
        pytest.skip("no small sample")
    expected = []
    for gm, inputs, compiled in found:
        expected.append(gm(*inputs))
        assert_same(compiled(*inputs), expected[-1], case[1])
    if expects_kernel(case[0], case[1], expected):
        assert sum(len(c.kernel_names) for c in made) >= 1, "the op was not lowered to a kernel"
