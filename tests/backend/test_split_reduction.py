"""Split reductions: huge reductions over few rows become two reductions, on both code generators.

The threshold is lowered so that small inputs (fast in Triton's interpreter)
take the split path; each case must equal eager and make the two-stage kernels.
"""
import pytest
import torch

import surge.lowering.lower as lower_module
from surge.backends.cpp import compile_aten_graphs_cpp
from surge.lowering.split_reduction import SPLIT_REDUCTION_MIN_ELEMENTS, plan_split
from surge.options import Options

from .helpers import aten_graph, assert_outputs_match, compile_fn, schedule_of

THRESHOLD = 64


def _ints(*shape):
    return torch.randint(-100, 100, shape, dtype=torch.int32)


CASES = {
    "sum_all": (lambda x: x.sum(), lambda: (torch.randn(1000),)),
    "sum_dim0_few_columns": (lambda x: x.sum(0), lambda: (torch.randn(500, 3),)),
    "mean_bf16": (lambda x: x.mean(), lambda: (torch.randn(1024).bfloat16(),)),
    "var_all": (lambda x: x.var(), lambda: (torch.randn(999) * 3 + 5,)),
    "var_mean_keepdim": (lambda x: torch.var_mean(x, dim=1, keepdim=True, correction=0),
                         lambda: (torch.randn(2, 777) + 3,)),
    "std_dim0": (lambda x: x.std(0), lambda: (torch.randn(640, 2),)),
    "argmax_all": (lambda x: x.argmax(), lambda: (torch.randn(1001),)),
    "argmin_dim0": (lambda x: x.argmin(0), lambda: (torch.randn(300, 2),)),
    "argmax_ties": (lambda x: (x > 0).float().argmax(), lambda: (torch.randn(1000),)),
    "any": (lambda x: (x > 3).any(), lambda: (torch.randn(1000),)),
    "all_dim1": (lambda x: (x > -3).all(1), lambda: (torch.randn(2, 1000),)),
    "int_sum": (lambda x: x.sum(), lambda: (_ints(1003),)),
    "amax_odd_length": (lambda x: x.amax(), lambda: (torch.randn(1003),)),
    "prod_near_one": (lambda x: (1 + x * 1e-3).prod(), lambda: (torch.randn(700),)),
    "sum_then_pointwise": (lambda x: x - x.sum(), lambda: (torch.randn(900),)),
}
TOL = {"mean_bf16": dict(atol=1e-2, rtol=1e-2)}


def _check(fn, compiled, make_inputs, name):
    inputs = make_inputs()
    actual, expected = compiled(*inputs), fn(*inputs)
    if name in TOL:
        torch.testing.assert_close(actual, expected, **TOL[name])
    else:
        assert_outputs_match(actual, expected)


@pytest.fixture
def low_threshold(monkeypatch):
    monkeypatch.setattr(lower_module, "SPLIT_REDUCTION_MIN_ELEMENTS", THRESHOLD)


@pytest.mark.parametrize("name", sorted(CASES))
def test_split_structure(name, low_threshold):
    fn, make_inputs = CASES[name]
    kernels = schedule_of(fn, *make_inputs()).kernels
    partial = [k for k in kernels if len(k.r_ranges) == 1 and len(k.x_ranges) >= 1 and k.is_reduction]
    assert len(kernels) >= 2 and partial, [str(k) for k in kernels]


@pytest.mark.parametrize("name", sorted(CASES))
def test_triton_split_matches_eager(name, low_threshold, tmp_path):
    fn, make_inputs = CASES[name]
    c = compile_fn(fn, *make_inputs(), options=Options(cache_dir=str(tmp_path), split_reduction_min_elements=THRESHOLD))
    _check(fn, c, make_inputs, name)


def test_cpp_split_matches_eager(low_threshold, tmp_path):
    names = sorted(CASES)
    graphs = []
    for name in names:
        fn, make_inputs = CASES[name]
        inputs = make_inputs()
        graphs.append((aten_graph(fn, *inputs), list(inputs)))
    compiled = compile_aten_graphs_cpp(graphs, Options(cache_dir=str(tmp_path), split_reduction_min_elements=THRESHOLD))
    for name, c in zip(names, compiled):
        assert len(c.kernel_names) >= 2, name
        _check(CASES[name][0], c, CASES[name][1], name)


def test_sum_of_a_long_vector_is_two_kernels_with_many_chunks(low_threshold):
    kernels = schedule_of(lambda x: x.sum(), torch.randn(1000)).kernels
    assert len(kernels) == 2
    first, second = kernels
    assert int(first.x_ranges[0]) * int(first.r_ranges[0]) == 1000
    assert second.x_ranges == () and second.r_ranges == first.x_ranges


def test_many_rows_or_short_rows_are_not_split(low_threshold):
    assert len(schedule_of(lambda x: x.sum(1), torch.randn(2048, 100)).kernels) == 1
    assert len(schedule_of(lambda x: x.sum(), torch.randn(40)).kernels) == 1


def test_default_plan_for_huge_reductions():
    splits, chunk = plan_split(1, 2 ** 26, SPLIT_REDUCTION_MIN_ELEMENTS)     # x.sum() of 2**26
    assert splits * chunk == 2 ** 26 and splits >= 256
    splits, chunk = plan_split(8, 2 ** 22, SPLIT_REDUCTION_MIN_ELEMENTS)     # x.sum(0) of (2**22, 8)
    assert splits * chunk == 2 ** 22 and 8 * splits >= 256
    splits, chunk = plan_split(1, 10 ** 6 + 3, SPLIT_REDUCTION_MIN_ELEMENTS)  # a prime-ish length: masked tail
    assert splits * chunk >= 10 ** 6 + 3 > (splits - 1) * chunk
    assert plan_split(4096, 2 ** 20, SPLIT_REDUCTION_MIN_ELEMENTS) is None    # rows enough already
    assert plan_split(1, 1000, SPLIT_REDUCTION_MIN_ELEMENTS) is None          # small


def test_split_kernels_and_masked_softmax_compile_for_sm90(low_threshold, tmp_path):
    from surge.runtime.target_compile import compile_in_subprocess

    from .test_extern_fusion import _attention_inputs, masked_softmax_attention

    paths = []
    for name in ("sum_all", "var_all", "argmax_all", "amax_odd_length", "all_dim1"):
        fn, make_inputs = CASES[name]
        paths.append(compile_fn(fn, *make_inputs(), options=Options(cache_dir=str(tmp_path), split_reduction_min_elements=THRESHOLD)).path)
    paths.append(compile_fn(masked_softmax_attention, *_attention_inputs(),
                            options=Options(cache_dir=str(tmp_path), split_reduction_min_elements=THRESHOLD)).path)
    results = compile_in_subprocess(paths)
    assert len(results) >= 11 and all(v == "ok" for v in results.values()), {k: v for k, v in results.items() if v != "ok"}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_the_threshold_is_an_option_of_surge_compile(backend):
    import surge

    x = torch.randn(5000)
    surge.counters.reset()
    split = surge.compile(lambda x: x.sum(), backend=backend, options={"split_reduction_min_elements": 1024})
    torch.testing.assert_close(split(x), x.sum(), rtol=1e-5, atol=1e-4)
    assert surge.counters["kernels"] == 2  # partials, then their total
    surge.reset()
    surge.counters.reset()
    whole = surge.compile(lambda x: x.sum(), backend=backend)
    torch.testing.assert_close(whole(x), x.sum(), rtol=1e-5, atol=1e-4)
    assert surge.counters["kernels"] == 1


def test_few_short_rows_split_on_a_gpu_only_when_they_loop():
    import dataclasses

    from surge.options import CompileConfig
    from surge.target import triton_target

    gpu_like = dataclasses.replace(triton_target("cpu", interpreted=True), splits_column_reductions=True)
    x = torch.randn(32, 600)   # rows under the threshold, all of them 16x over it
    looped = CompileConfig(split_reduction_min_elements=1024, persistent_reduction_limit=256)
    assert len(schedule_of(lambda x: x.sum(1), x, target=gpu_like, config=looped).kernels) == 2
    # a row one persistent tile holds stays one kernel (its epilogue works on it in registers)
    persistent = CompileConfig(split_reduction_min_elements=1024)
    assert len(schedule_of(lambda x: x.sum(1), x, target=gpu_like, config=persistent).kernels) == 1
    # and a target that does not fill GPU programs splits only rows over the threshold
    cpu_like = dataclasses.replace(gpu_like, splits_column_reductions=False)
    assert len(schedule_of(lambda x: x.sum(1), x, target=cpu_like, config=looped).kernels) == 1
