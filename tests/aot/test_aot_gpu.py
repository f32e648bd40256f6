"""On a CUDA device: tracing keeps the real device, training matches eager."""
import pytest
import torch
import torch.nn as nn

from surge.aot import trace_aten

from .helpers import compile_aot

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)


def test_meta_records_cuda_device_and_cpu_scalars_mix():
    def f(x):
        return (x * torch.tensor(2.0)).sum(0).cpu()

    x = torch.randn(4, 4, device="cuda")
    gm = trace_aten(torch.fx.symbolic_trace(f), [x])
    devices = {n.meta["device"].type for n in gm.graph.nodes if n.op == "call_function"}
    assert devices == {"cuda", "cpu"}
    torch.testing.assert_close(gm(x)[0], f(x))


def test_training_step_on_cuda_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 8)).cuda()
    reference = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 8)).cuda()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(16, 32, device="cuda")
    compiled = compile_aot(model, [x], boxed=True)
    compiled(x).square().mean().backward()
    reference(x).square().mean().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
