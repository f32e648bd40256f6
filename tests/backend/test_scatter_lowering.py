"""slice_scatter, select_scatter and as_strided_scatter lowered as pointwise values: the
gradient of a slice (zeros with the slice's gradient in place) is one kernel, on both code
generators; so is an as_strided_scatter over all of its base (the gradient of a flatten)."""
import pytest
import torch

from surge.backends.cpp import compile_aten_graph_cpp
from surge.lowering.ir import ExternBuffer

from .helpers import aten_graph, compile_fn, schedule_of

CASES = {
    "gradient_of_a_slice": (lambda x, g: torch.slice_scatter(torch.zeros_like(x), g, 1, 2, 6),
                            lambda: (torch.randn(3, 8), torch.randn(3, 4))),
    "open_end": (lambda x, g: torch.slice_scatter(x, g * 2, 0, 1), lambda: (torch.randn(5, 4), torch.randn(4, 4))),
    "whole_dim": (lambda x, g: torch.slice_scatter(x, g, 1), lambda: (torch.randn(3, 4), torch.randn(3, 4))),
    "negative_start": (lambda x, g: torch.slice_scatter(x, g, -1, -3, None),
                       lambda: (torch.randn(3, 7), torch.randn(3, 3))),
    "select": (lambda x, g: torch.select_scatter(x, g, 1, -2), lambda: (torch.randn(3, 5, 2), torch.randn(3, 2))),
    "bf16": (lambda x, g: torch.slice_scatter(x, g, 0, 0, 2),
             lambda: (torch.randn(4, 3).bfloat16(), torch.randn(2, 3).bfloat16())),
    "as_strided_whole": (lambda x, g: torch.as_strided_scatter(torch.zeros_like(x) + x, g * 2, [4, 6], [6, 1], 0),
                         lambda: (torch.randn(24), torch.randn(4, 6))),
    "as_strided_whole_3d": (lambda x, g: torch.as_strided_scatter(x * 3, g, [2, 3, 4], [12, 4, 1]),
                                         lambda: (torch.randn(6, 4), torch.randn(2, 3, 4))),
    "as_strided_part": (lambda x, g: torch.as_strided_scatter(x + 1, g, [2, 3], [1, 2], 1),
                        lambda: (torch.randn(4, 3), torch.randn(2, 3))),
    "nan_base_outside_the_slice": (lambda x, g: torch.slice_scatter(x, g, 0, 0, 2),
                                   lambda: (torch.full((4, 3), float("nan")), torch.randn(2, 3))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_scatter_matches_eager_on_both_generators(name):
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    expected = fn(*inputs)
    compilers = [compile_fn(fn, *inputs)]
    if inputs[0].device.type == "cpu":
        compilers.append(compile_aten_graph_cpp(aten_graph(fn, *inputs), list(inputs)))
    for compiled in compilers:
        out = compiled(*inputs)
        out = out[0] if isinstance(out, (list, tuple)) else out
        torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)


def test_gradient_of_a_slice_is_one_kernel_and_no_extern():
    fn, make_inputs = CASES["gradient_of_a_slice"]
    schedule = schedule_of(fn, *make_inputs())
    assert len(schedule.kernels) == 1
    assert not [s for s in schedule.steps if isinstance(getattr(s, "buffer", None), ExternBuffer)]


@pytest.mark.parametrize("name, externs", [("as_strided_whole", 0), ("as_strided_part", 1)])
def test_as_strided_scatter_over_its_whole_base_is_no_extern(name, externs):
    fn, make_inputs = CASES[name]
    schedule = schedule_of(fn, *make_inputs())
    assert len([s for s in schedule.steps if isinstance(getattr(s, "buffer", None), ExternBuffer)]) == externs
