"""The loop IR's and the schedule's pipelines: named steps that leave their input as it was,
and the fused-forms step that both code generators render."""
import torch

from surge.lowering.fused_forms import fuse_forms
from surge.lowering.lower import Lowering, graph_device
from surge.lowering.op_groups import FUSED_FORM_OPS
from surge.lowering.pipeline import LOOP_IR
from surge.lowering.values import op_count
from surge.options import CompileConfig
from surge.schedule import schedule_graph
from surge.schedule.scheduler import SCHEDULE
from surge.target import default_target

from .helpers import aten_graph, randn


def exact_gelu_by_hand(x):
    return x * (0.5 * (1 + torch.erf(x * 0.7071067811865476)))


def plain_lowering(fn, *inputs):
    """The loop graph as lowering makes it, before the loop IR's pipeline."""
    device = graph_device(inputs)
    return Lowering(aten_graph(fn, *inputs), list(inputs), device, default_target(device.type),
                    CompileConfig()).run()


def test_the_pipelines_name_their_steps():
    assert LOOP_IR.step_names == ["fused_forms"]
    assert SCHEDULE.step_names == ["fuse", "scatter_stores", "mark_stores", "name_kernels", "plan_memory"]


def test_fused_forms_is_a_new_graph_with_one_op_per_form():
    graph = plain_lowering(exact_gelu_by_hand, randn(64))
    before = str(graph)
    fused = fuse_forms(graph)
    assert str(graph) == before, "the step leaves the graph it was given as it was"
    assert "normal_cdf(" in str(fused) and "erf(" not in str(fused).replace("normal_cdf(", "")
    (old,), (new,) = graph.buffers, fused.buffers
    assert new is not old and op_count(new.value) == op_count(old.value)   # 4 ops in one form
    assert FUSED_FORM_OPS["normal_cdf"] == 4


def test_fused_forms_leave_float64_and_other_constants_alone():
    x64 = torch.randn(64, dtype=torch.float64)
    graph = plain_lowering(exact_gelu_by_hand, x64)
    assert fuse_forms(graph).buffers[0] is graph.buffers[0]
    other = plain_lowering(lambda x: 0.25 * (1 + torch.erf(x * 0.5)), randn(64))
    text = str(fuse_forms(other))
    assert "one_plus_erf(" in text and "normal_cdf(" not in text


def test_scheduling_reads_the_loop_graph_only():
    graph = plain_lowering(lambda x: torch.softmax(x, -1) * 2, randn(8, 37))
    before = str(graph)
    schedule = schedule_graph(graph)
    assert str(graph) == before and schedule.memory is not None
    assert schedule.kernels and all(k.name.startswith("fused_") for k in schedule.kernels)
