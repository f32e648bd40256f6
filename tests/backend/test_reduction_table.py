"""The table of reduction kinds (lowering/reductions.py) and its rules, rendered by both
code generators: identities that combine to nothing, argmax/argmin's NaN and tie rules in
persistent, looped and split kernels, on Triton (interpreter) and C++ alike."""
import pytest
import torch

from surge.backends.cpp import compile_aten_graph_cpp
from surge.lowering.reductions import REDUCTIONS, identity_value
from surge.options import CompileConfig, Options

from .helpers import aten_graph, compile_fn, triton_target_here

COMBINE = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b,
    "max": torch.maximum, "min": torch.minimum,
    "or": torch.logical_or, "and": torch.logical_and,
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_the_identity_combines_to_nothing(name, dtype):
    kind = REDUCTIONS[name]
    if kind.combine not in COMBINE:   # moments: its identity is the zero sum of a pass
        assert kind.identity_value(dtype) in (0, False)
        return
    values = torch.tensor([-3, 0, 1, 7], dtype=torch.float32).to(dtype)
    identity = torch.full_like(values, identity_value(kind.identity, dtype))
    combined = COMBINE[kind.combine](identity, values)
    if kind.finalize == "nonzero":   # any / all: truth values
        assert torch.equal(combined, values != 0)
    else:
        torch.testing.assert_close(combined, values)


def test_the_table_holds_every_kind_lowering_makes():
    assert set(REDUCTIONS) == {"sum", "prod", "max", "min", "argmax", "argmin", "any", "all", "var"}
    assert {k.name for k in REDUCTIONS.values() if k.tracks_index} == {"argmax", "argmin"}
    assert all(k.nan == "extreme" for k in REDUCTIONS.values() if k.tracks_index)


def rows_with_ties_and_nans(length: int) -> torch.Tensor:
    """Row 0: ties of the maximum and minimum (first wins); row 1: two NaNs (the first wins);
    row 2: a NaN after the extremes; row 3: plain values."""
    gen = torch.Generator().manual_seed(length)
    x = torch.randint(-50, 50, (4, length), generator=gen).float()
    x[0, length // 3] = x[0, 2 * length // 3] = 1000.0
    x[0, length // 4] = x[0, length - 1] = -1000.0
    x[1, length // 2], x[1, length - 2] = float("nan"), float("nan")
    x[2, 0], x[2, length - 1] = 2000.0, float("nan")
    return x


def arg_both(x):
    return x.argmax(-1), x.argmin(-1)


def arg_flat(x):
    return x.argmax(), x.argmin()


# a persistent tile, a looped row (more than 8192 elements), and one row split in two kernels
# (a low split threshold keeps the interpreter quick)
CASES = [(arg_both, (4, 37)), (arg_both, (4, 9000)), (arg_flat, (1, 5000))]
SMALL_SPLITS = Options(split_reduction_min_elements=1024)


@pytest.mark.parametrize("fn,shape", CASES, ids=["persistent", "looped", "split"])
@pytest.mark.parametrize("target", ["triton", "cpp"])
def test_argmax_nan_and_tie_rules_on_both_targets(fn, shape, target):
    x = rows_with_ties_and_nans(shape[1])
    if shape[0] == 1:
        x = x[1].contiguous()   # the row with two NaNs, flattened
    compiled = (compile_fn(fn, x, options=SMALL_SPLITS) if target == "triton"
                else compile_aten_graph_cpp(aten_graph(fn, x), [x], SMALL_SPLITS))
    if shape[0] == 1:
        assert len(compiled.kernel_names) >= 2, "the row is split"
    for got, want in zip(compiled(x), fn(x)):
        assert torch.equal(got, want), (got, want)


def test_a_new_kind_with_known_rules_is_one_table_row(monkeypatch):
    """A kind that combines and finalizes as max does needs nothing of either generator:
    both render it from its row, as they render max."""
    import dataclasses

    from surge.codegen.cpp.module import generate_cpp_module
    from surge.codegen.triton.module import generate_module
    from surge.lowering import reductions
    from surge.lowering.lower import lower_graph
    from surge.schedule import schedule_graph

    monkeypatch.setitem(reductions.REDUCTIONS, "row_peak",
                        dataclasses.replace(reductions.REDUCTIONS["max"], name="row_peak"))
    x = torch.randn(8, 37)
    graph, _ = lower_graph(aten_graph(lambda t: t.amax(1) * 2, x), [x])
    renamed = dataclasses.replace(graph, buffers=[
        dataclasses.replace(b, reduction_type="row_peak") if getattr(b, "reduction_type", None) == "max" else b
        for b in graph.buffers])
    assert any(getattr(b, "reduction_type", None) == "row_peak" for b in renamed.buffers)
    triton = triton_target_here()
    for generate in (lambda s: generate_module(s, triton, CompileConfig())[0],
                     lambda s: generate_cpp_module(s, "").source):
        assert generate(schedule_graph(renamed)) == generate(schedule_graph(graph))
