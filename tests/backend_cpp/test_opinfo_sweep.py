"""OpInfo sweep through the cpp backend: every op the Triton sweep covers, a few small float32
samples each, traced by surge's aot layer, built as C++ and compared with eager.

All samples build into one library (one compiler run). An op whose ATen graph the aot
layer cannot trace is skipped with its reason; a wrong result or a backend error fails.
"""
import pytest

from surge.backends.cpp import compile_aten_graphs_cpp
from surge.codegen.cpp.host import generate_host_module
from surge.codegen.cpp.module import generate_cpp_module
from surge.lowering.lower import lower_graph
from surge.schedule import schedule_graph
from tests.backend.helpers import assert_outputs_match
from tests.backend.test_opinfo_sweep import OPS, VIEW_OPS, _graph_of, _small_samples


class Deferred:
    """What the aot layer gets from the compiler: bound to the real graph after the one build."""

    def __init__(self, aten_gm, inputs):
        self.aten_gm, self.inputs, self.compiled = aten_gm, list(inputs), None

    def __call__(self, *args):
        return self.compiled(*args)


def _check_generates(aten_gm, inputs):
    graph, _ = lower_graph(aten_gm, inputs)
    schedule = schedule_graph(graph)
    generate_host_module(schedule, generate_cpp_module(schedule))


@pytest.fixture(scope="module")
def sweep():
    from surge.aot import aot_compile
    from surge.options import Options

    results, pending = {}, []
    for name in sorted(OPS):
        samples = _small_samples(OPS[name])
        if not samples:
            results[name] = ("skip", "no small sample")
            continue
        made, runs = [], []

        def compiler(aten_gm, example_inputs, made=made):
            made.append(Deferred(aten_gm, example_inputs))
            return made[-1]
        try:
            for sample in samples:
                gm, inputs = _graph_of(OPS[name], sample)
                runs.append((gm, inputs, aot_compile(gm, inputs, fw_compiler=compiler, bw_compiler=compiler,
                                                     options=Options(raise_internal_errors=True))))
        except Exception as error:  # the aot layer's own limits are its tests' business
            results[name] = ("skip", f"aot layer: {type(error).__name__}: {error}"[:200])
            continue
        try:
            for d in made:
                _check_generates(d.aten_gm, d.inputs)
        except Exception as error:
            results[name] = ("error", f"{type(error).__name__}: {error}"[:500])
            continue
        results[name] = ("ok", runs, made)
        pending.extend(made)
    built = compile_aten_graphs_cpp([(d.aten_gm, d.inputs) for d in pending])
    for d, c in zip(pending, built):
        d.compiled = c
    return results


# Failures in shared layers, reported to their owners; strict: the test fails once they are fixed.
KNOWN_FAILURES: dict = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_FAILURES[n], strict=True))
                                  if n in KNOWN_FAILURES else n for n in sorted(OPS)])
def test_op_matches_eager(sweep, name):
    result = sweep[name]
    if result[0] == "skip":
        pytest.skip(result[1])
    assert result[0] == "ok", result[1]
    _, runs, made = result
    for gm, inputs, compiled in runs:
        expected = gm(*inputs)
        actual = compiled(*inputs)
        assert_outputs_match(actual, expected)
    if name not in VIEW_OPS:
        assert sum(len(d.compiled.kernel_names) for d in made) >= 1, "the op was not lowered to a kernel"
