"""The dtype sweep through the cpp backend: the same cases as the Triton one
(``tests/backend/dtype_sweep.py``), all built into one library (one compiler run)."""
import pytest

from tests.backend.dtype_sweep import assert_same, build_cpp, case_id, cases, expects_kernel

CASES = cases()


@pytest.fixture(scope="module")
def sweep():
    return build_cpp(CASES)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_op_matches_eager_in_dtype(sweep, case):
    result = sweep[case]
    if result[0] == "skip":
        pytest.skip(result[1])
    assert result[0] == "ok", result[1]
    _, runs, made = result
    expected = []
    for gm, inputs, compiled in runs:
        expected.append(gm(*inputs))
        assert_same(compiled(*inputs), expected[-1], case[1])
    if expects_kernel(case[0], case[1], expected):
        assert sum(len(d.compiled.kernel_names) for d in made) >= 1, "the op was not lowered to a kernel"
