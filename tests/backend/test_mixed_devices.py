"""CPU tensors in a graph whose kernels run on an accelerator (Whisper's layerdrop draws
``torch.rand([]) < p`` on the CPU among CUDA activations).

Without a GPU, meta tensors stand for the accelerator's: nothing runs, and the tests
check what lowering, scheduling and Triton codegen make of the graph. The graph's
device is its accelerator's whatever the input order; ops that read a CPU tensor run
as extern ATen calls (as eager does, which passes a 0-d CPU tensor to a CUDA kernel as
a scalar); no kernel reads a CPU buffer. ``test_layerdrop_on_gpu`` runs it for real.
"""
import pytest
import torch

from surge.codegen.triton.module import generate_module
from surge.lowering.ir import ComputedBuffer, ExternBuffer
from surge.lowering.lower import graph_device, lower_graph
from surge.lowering.values import loaded_buffers
from surge.schedule import schedule_graph
from surge.options import CompileConfig
from surge.schedule.groups import KernelGroup
from surge.target import triton_target

from .helpers import aten_graph


def layerdrop(x, p):
    keep = torch.rand([]) < 0.5           # a CPU scalar, whatever device x is on
    y = torch.relu(x * p + 1)             # p: a 0-d CPU tensor meeting x
    return torch.where(keep, y, x) * 3, keep, (p * 2).sum()


def _accelerator_inputs(first_scalar: bool):
    x, p = torch.empty(4, 8, device="meta"), torch.tensor(0.3)
    return [p, x] if first_scalar else [x, p]


def _lowered(first_scalar: bool):
    inputs = _accelerator_inputs(first_scalar)
    fn = (lambda p, x: layerdrop(x, p)) if first_scalar else layerdrop
    graph, _ = lower_graph(aten_graph(fn, *inputs), inputs)
    return graph


def test_graph_device_is_the_accelerators_whatever_the_input_order():
    for first_scalar in (False, True):
        assert graph_device(_accelerator_inputs(first_scalar)) == torch.device("meta")
    assert graph_device([torch.tensor(1.0), torch.ones(2)]) == torch.device("cpu")
    assert graph_device([3, None]) == torch.device("cpu")


@pytest.mark.parametrize("first_scalar", [False, True])
def test_no_kernel_reads_a_cpu_tensor(first_scalar):
    graph = _lowered(first_scalar)
    assert graph.device == torch.device("meta")
    by_name = graph.by_name
    kernels = [b for b in graph.buffers if isinstance(b, ComputedBuffer)]
    assert kernels, "the accelerator's pointwise work is still lowered to kernels"
    for buf in kernels:
        assert buf.device == graph.device
        assert all(by_name[name].device == graph.device for name in loaded_buffers(buf.value)), str(buf)
    # the CPU work is ATen's, on the CPU: the draw, its comparison, and p's own sum
    cpu_externs = {b.op for b in graph.buffers if isinstance(b, ExternBuffer) and b.device.type == "cpu"}
    aten = torch.ops.aten
    assert {aten.rand.default, aten.lt.Scalar, aten.sum.dim_IntList} <= cpu_externs


@pytest.mark.parametrize("first_scalar", [False, True])
def test_triton_kernels_take_only_accelerator_pointers(first_scalar):
    schedule = schedule_graph(_lowered(first_scalar))
    by_name = schedule.graph.by_name
    _, kernels = generate_module(schedule, triton_target("cuda", interpreted=False), CompileConfig())
    assert len(kernels) == sum(isinstance(s, KernelGroup) for s in schedule.steps) >= 1
    for ks in kernels.values():
        for param, buffer, _ in ks.params:
            if buffer is not None:
                assert by_name[buffer].device == torch.device("meta"), (ks.name, param, buffer)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("first_scalar", [False, True])
def test_layerdrop_on_gpu(first_scalar):
    import surge

    fn = (lambda p, x: layerdrop(x, p)) if first_scalar else layerdrop
    compiled = surge.compile(fn, backend="triton", fullgraph=True)
    for _ in range(3):   # fresh inputs each call; the same draw under the same seed
        x, p = torch.randn(64, 256, device="cuda"), torch.tensor(float(torch.rand(())))
        args = (p, x) if first_scalar else (x, p)
        torch.manual_seed(1)
        expected = fn(*args)
        torch.manual_seed(1)
        actual = compiled(*args)
        for a, e in zip(actual, expected):
            assert a.device == e.device and a.dtype == e.dtype
            torch.testing.assert_close(a, e)
    assert surge.counters["kernels"] >= 1
