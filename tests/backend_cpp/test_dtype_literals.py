"""Scalars and fill values take the dtype of the tensor they meet, in C++ kernels: the
programs of ``tests/backend/dtype_programs.py``, all built into one library."""
import pytest

from surge.backends.cpp import compile_aten_graphs_cpp
from tests.backend.dtype_programs import PROGRAMS, assert_exact
from tests.backend.helpers import aten_graph

NAMES = sorted(PROGRAMS)


@pytest.fixture(scope="module")
def built():
    traced = {n: aten_graph(PROGRAMS[n][0], *PROGRAMS[n][1]()) for n in NAMES}
    graphs = [(traced[n], list(PROGRAMS[n][1]())) for n in NAMES]
    return dict(zip(NAMES, compile_aten_graphs_cpp(graphs)))


@pytest.mark.parametrize("name", NAMES)
def test_program_matches_eager_exactly(built, name):
    fn, make = PROGRAMS[name]
    compiled = built[name]
    assert compiled.kernel_names, "lowered to kernels, not run as ATen ops"
    inputs = make()
    assert_exact(compiled(*inputs), fn(*inputs))
