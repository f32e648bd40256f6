"""The Executable both targets return: its launches as plain data, warmup, and the
artifact the compiled-graph cache stores, loaded back into an equal Executable."""
from __future__ import annotations

import pytest
import torch

from surge.backends import pipeline
from surge.backends.cpp import compile_aten_graph_cpp, target_for as cpp_target_for
from surge.backends.executable import Executable
from surge.backends.triton import compile_aten_graph
from surge.counters import counters
from surge.options import CompileConfig, Options

from .helpers import DEVICE, aten_graph, compile_fn, randn, triton_target_here


def block(x, w, b):
    """A kernel, an extern matmul, a kernel after it."""
    h = torch.nn.functional.gelu(x * 2)
    return (h @ w + b).relu(), h.sum(-1)


def _inputs():
    return randn(4, 8), randn(8, 6), randn(6)


def _compile(target_name: str, tmp_path, inputs):
    options = Options(cache_dir=str(tmp_path), graph_cache=False)
    if target_name == "triton":
        return compile_fn(block, *inputs, options=options)
    return compile_aten_graph_cpp(aten_graph(block, *inputs), list(inputs), options)


def _target(target_name: str, config: CompileConfig):
    return triton_target_here() if target_name == "triton" else cpp_target_for(config)


TARGETS = ["triton", "cpp"] if DEVICE == "cpu" else ["triton"]


def _plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return isinstance(value, (str, int, bool))


@pytest.mark.parametrize("target_name", TARGETS)
def test_launches_inputs_and_outputs_are_plain_data_in_run_order(target_name, tmp_path):
    inputs = _inputs()
    exe = _compile(target_name, tmp_path, inputs)
    assert isinstance(exe, Executable) and exe.target == target_name
    assert _plain(exe.launches) and _plain(exe.inputs) and _plain(exe.outputs)
    kinds = [e["kind"] for e in exe.launches]
    kernels = [e for e in exe.launches if e["kind"] == "kernel"]
    externs = [e for e in exe.launches if e["kind"] == "extern"]
    assert len(kernels) == len(exe.kernel_names) and {e["name"] for e in kernels} == set(exe.kernel_names)
    assert [e["op"] for e in externs] == ["aten.mm.default"] and kinds[0] == "kernel" and kinds[-1] == "kernel"
    # the matmul reads what an earlier kernel wrote, the last kernel reads the matmul's result
    mm = kinds.index("extern")
    assert set(exe.launches[mm]["reads"]) & {n for e in kernels[:mm] for n in e["writes"]}
    assert externs[0]["name"] in exe.launches[-1]["reads"]
    assert [(e["shape"], e["stride"], e["dtype"]) for e in exe.inputs[:3]] == [
        ([4, 8], [8, 1], "float32"), ([8, 6], [6, 1], "float32"), ([6], [1], "float32")]
    assert [(e["shape"], e["dtype"]) for e in exe.outputs] == [([4, 6], "float32"), ([4], "float32")]
    if target_name == "cpp":   # kernels between two extern calls run in one library call
        assert all(e["segment"].startswith("segment_") for e in kernels)


@pytest.mark.parametrize("target_name", TARGETS)
def test_warmup_then_calls_match_eager(target_name, tmp_path):
    inputs = _inputs()
    exe = _compile(target_name, tmp_path, inputs)
    assert exe.warmup() is exe and exe.warm
    fresh = _inputs()
    for got, want in zip(exe(*fresh), block(*fresh)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_after_warmup_the_first_call_binds_nothing(tmp_path):
    """Each Triton launcher binds (config, grid; on a GPU the binary and its direct launch)
    at warmup: what a CUDA graph records after ``warmup()`` compiles and binds nothing."""
    cold = _compile("triton", tmp_path, _inputs())
    before = counters["kernel_bindings"]
    cold(*_inputs())
    assert counters["kernel_bindings"] - before == len(cold.launchers) > 0   # bound at the first launches
    exe = _compile("triton", tmp_path, _inputs())
    exe.warmup()
    bound = counters["kernel_bindings"]
    assert bound - before - len(cold.launchers) == len(exe.launchers)
    for _ in range(2):
        fresh = _inputs()
        for got, want in zip(exe(*fresh), block(*fresh)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert counters["kernel_bindings"] == bound
    exe.warmup()   # once is enough
    assert counters["kernel_bindings"] == bound


def test_a_symbolic_graph_binds_for_its_example_sizes_at_warmup(tmp_path):
    from .test_symbolic_sizes import symbolic_graph

    x = randn(6, 8)
    gm, examples = symbolic_graph(lambda v: (v.softmax(-1) * 2).sum(-1), [x], {0: (0,)})
    exe = compile_aten_graph(gm, examples, Options(cache_dir=str(tmp_path), graph_cache=False,
                                                   raise_internal_errors=True))
    assert all(launcher.meta.get("symbolic") for launcher in exe.launchers.values())
    exe.warmup()
    bound = counters["kernel_bindings"]
    torch.testing.assert_close(exe(x), (x.softmax(-1) * 2).sum(-1))
    assert counters["kernel_bindings"] == bound
    other = randn(9, 8)   # other sizes bind at their first launch
    torch.testing.assert_close(exe(other), (other.softmax(-1) * 2).sum(-1))
    assert counters["kernel_bindings"] == bound + len(exe.launchers)


@pytest.mark.parametrize("target_name", TARGETS)
def test_the_artifact_loads_back_into_an_equal_executable(target_name, tmp_path):
    import pickle

    inputs = _inputs()
    exe = _compile(target_name, tmp_path, inputs)
    config = CompileConfig.from_options(Options(cache_dir=str(tmp_path)))
    artifact = pickle.loads(pickle.dumps(exe.artifact()))
    loaded = pipeline.load_artifact(artifact, _target(target_name, config), config)
    assert loaded.cache_hit and loaded.schedule is None and loaded.target == target_name
    assert loaded.launches == exe.launches and loaded.inputs == exe.inputs and loaded.outputs == exe.outputs
    if target_name == "cpp":
        assert not loaded.compiled   # the library came from the library cache
    fresh = _inputs()
    for got, want in zip(loaded(*fresh), block(*fresh)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    other = "cpp" if target_name == "triton" else "triton"
    with pytest.raises(ValueError, match="target"):
        pipeline.load_artifact(dict(artifact, target=other), _target(target_name, config), config)
