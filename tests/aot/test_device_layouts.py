"""Layouts the device decides: convolution results as ATen lays them out, and the
channels-last policy for 16-bit convolutions (aot/device_layouts.py).

The policy targets CUDA; here it runs on the CPU (``device_type`` switched), which
exercises the same rewrite: the conversion before the first convolution, the layouts
that follow from it, eager's layout for the outputs, and the retrace without the policy
when a ``.view()`` needs eager's contiguous layout.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import surge
from surge.aot.device_layouts import ChannelsLastConvolutions


def _aten_graphs(debug_dir) -> str:
    """The ATen graphs aot handed on (not the per-step dumps, ``aten_forward.01_dce.py``)."""
    return "\n".join(p.read_text() for p in debug_dir.rglob("aten_*.py") if "." not in p.stem)


def test_a_convolution_result_has_the_layout_the_device_gives_it():
    conv = nn.Conv2d(8, 16, 3, padding=1)
    x = torch.randn(2, 8, 10, 10).to(memory_format=torch.channels_last)

    def f(x):
        return torch.relu(conv(x)) * 2

    compiled = surge.compile(f, backend="cpp")
    with torch.no_grad():
        out, ref = compiled(x), f(x)
    torch.testing.assert_close(out, ref)
    # oneDNN keeps channels-last (the meta kernel says contiguous): the relu and the product
    # after the convolution were planned on the layout the call really returns
    assert out.stride() == ref.stride()


def test_convolution_gradients_have_the_devices_layout():
    conv = nn.Conv2d(4, 6, 3)
    x = torch.randn(2, 4, 7, 7).to(memory_format=torch.channels_last).requires_grad_()
    compiled = surge.compile(lambda x: conv(x).square().sum(), backend="cpp")
    compiled(x).backward()
    got_x, got_w = x.grad.clone(), conv.weight.grad.clone()
    x.grad = conv.weight.grad = None
    conv(x).square().sum().backward()
    torch.testing.assert_close(got_x, x.grad)
    torch.testing.assert_close(got_w, conv.weight.grad, rtol=1e-4, atol=1e-4)
    assert got_x.stride() == x.grad.stride()


@pytest.fixture
def policy_on_cpu(monkeypatch):
    monkeypatch.setattr(ChannelsLastConvolutions, "device_type", "cpu")


class _Net(nn.Module):
    def __init__(self, flatten_with_view: bool = False):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 3, padding=1)
        self.flatten_with_view = flatten_with_view

    def forward(self, x):
        y = torch.relu(self.a(x))
        y = self.b(y) + y
        if self.flatten_with_view:
            return y.view(y.shape[0], -1)   # needs a contiguous y, as eager has it
        return y


def test_16_bit_convolutions_run_channels_last_and_outputs_keep_eagers_layout(policy_on_cpu, tmp_path):
    net = _Net().to(torch.bfloat16)
    x = torch.randn(2, 3, 12, 12, dtype=torch.bfloat16)
    compiled = surge.compile(net, backend="cpp", options={"debug_dir": str(tmp_path)})
    with torch.no_grad():
        out, ref = compiled(x), net(x)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    assert out.is_contiguous()           # eager's layout, although the graph computed channels-last
    graphs = _aten_graphs(tmp_path)
    assert "memory_format = torch.channels_last" in graphs   # one conversion, before the first conv
    assert graphs.count("memory_format = torch.channels_last") == 1


def test_a_view_that_needs_eagers_layout_traces_without_the_policy(policy_on_cpu, tmp_path):
    net = _Net(flatten_with_view=True).to(torch.bfloat16)
    x = torch.randn(2, 3, 12, 12, dtype=torch.bfloat16)
    compiled = surge.compile(net, backend="cpp", options={"debug_dir": str(tmp_path)})
    surge.counters.reset()
    with torch.no_grad():
        out, ref = compiled(x), net(x)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    assert surge.counters["fallbacks"] == 0
    assert "memory_format = torch.channels_last" not in _aten_graphs(tmp_path)


class _BnNet(nn.Module):
    """Convolutions with batch norms, a residual and a pooled head: a ResNet block in small."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn_a = nn.BatchNorm2d(8)
        self.b = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn_b = nn.BatchNorm2d(8)
        self.down = nn.Conv2d(8, 8, 1, bias=False)   # a 1x1 weight: channels-last strides differ
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn_a(self.a(x)))
        y = torch.relu(self.bn_b(self.b(y)) + self.down(y))
        pooled = y.mean((2, 3), keepdim=True)        # (N, C, 1, 1): likewise
        return self.head(pooled.flatten(1)), y, pooled


def test_training_graphs_run_channels_last_with_eagers_layouts_outside(policy_on_cpu, tmp_path):
    torch.manual_seed(0)
    net = _BnNet()
    ref_net = _BnNet()
    ref_net.load_state_dict(net.state_dict())
    x = torch.randn(2, 3, 8, 8)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled = surge.compile(net, backend="cpp", options={"debug_dir": str(tmp_path)})
    surge.counters.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = compiled(xa)
        ref = ref_net(xb)
    loss = sum(o.float().square().mean() for o in out)
    ref_loss = sum(o.float().square().mean() for o in ref)
    loss.backward()
    ref_loss.backward()
    assert surge.counters["fallbacks"] == 0
    torch.testing.assert_close(loss, ref_loss, rtol=2e-2, atol=2e-2)
    for o, r in zip(out, ref):
        assert o.stride() == r.stride()        # eager's layouts for the outputs ...
    torch.testing.assert_close(xa.grad, xb.grad, rtol=5e-2, atol=5e-2)
    assert xa.grad.stride() == xb.grad.stride()
    for p, q in zip(net.parameters(), ref_net.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=5e-2, atol=5e-2)
        assert p.grad.stride() == q.grad.stride()   # ... and for the gradients
    graphs = _aten_graphs(tmp_path)
    assert graphs.count("memory_format = torch.channels_last") == 1   # before the first convolution
    # the backward's convolutions give channels-last gradients; the input's and the weights'
    # leave the graph in eager's layout (a leaf's .grad would hide it: autograd copies)
    backward = "\n".join(p.read_text() for p in tmp_path.rglob("aten_backward.py"))
    assert backward.count("memory_format = torch.contiguous_format") == 4
