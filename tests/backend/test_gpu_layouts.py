"""On a CUDA device: 16-bit convolutions run channels-last (aot/device_layouts.py)."""
import pytest
import torch
import torch.nn as nn

import surge

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)


class _Block(nn.Module):
    def __init__(self, flatten_with_view: bool):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(32)
        self.dw = nn.Conv2d(32, 32, 7, padding=3, groups=32)
        self.pw = nn.Conv2d(32, 64, 1)
        self.flatten_with_view = flatten_with_view

    def forward(self, x):
        y = torch.relu(self.bn(self.stem(x)))
        y = self.dw(y) + y
        y = self.pw(y)
        # SE-style gating views (N, C, H*W), which channels-last allows too
        y = y * y.view(y.shape[0], y.shape[1], -1).mean(-1)[:, :, None, None].sigmoid()
        if self.flatten_with_view:   # (N, C*H*W) needs eager's contiguous layout
            return y.view(y.shape[0], -1)
        return y


def _kernel_names(fn, *args) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return [e.key for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("flatten_with_view", [False, True])
def test_16_bit_convnet_matches_eager_with_eagers_output_layout(flatten_with_view, tmp_path):
    net = _Block(flatten_with_view).cuda().to(torch.bfloat16).eval()
    x = torch.randn(4, 3, 64, 64, device="cuda", dtype=torch.bfloat16)
    compiled = surge.compile(net, options={"debug_dir": str(tmp_path)})
    surge.counters.reset()
    with torch.no_grad():
        out, ref = compiled(x), net(x)
        kernels = _kernel_names(compiled, x)
    torch.testing.assert_close(out, ref, rtol=3e-2, atol=3e-2)
    assert out.stride() == ref.stride()
    assert surge.counters["fallbacks"] == 0
    graphs = "\n".join(p.read_text() for p in tmp_path.rglob("aten_*.py") if "." not in p.stem)   # not step dumps
    assert ("memory_format = torch.channels_last" in graphs) is not flatten_with_view
    if not flatten_with_view:
        # cuDNN returns its NHWC results as they are: no transpose back to NCHW after a
        # convolution (ATen still converts the NCHW weights, with a copy kernel)
        assert not [k for k in kernels if "nhwcToNchw" in k], kernels


class _BnBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(64)
        self.conv2 = nn.Conv2d(64, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return torch.relu(self.bn2(self.conv2(y)) + y).mean((2, 3))


def test_autocast_training_runs_channels_last_with_eagers_gradient_layouts(tmp_path):
    import copy

    torch.manual_seed(0)
    net = _BnBlock().cuda()
    ref_net = copy.deepcopy(net)
    x = torch.randn(8, 3, 32, 32, device="cuda")
    compiled = surge.compile(net, options={"debug_dir": str(tmp_path)})
    surge.counters.reset()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = compiled(x).float().square().mean()
        ref = ref_net(x).float().square().mean()
    loss.backward()
    ref.backward()
    assert surge.counters["fallbacks"] == 0
    torch.testing.assert_close(loss, ref, rtol=3e-2, atol=3e-2)
    for p, q in zip(net.parameters(), ref_net.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=5e-2, atol=5e-2)
        assert p.grad.stride() == q.grad.stride()
    torch.testing.assert_close(net.bn.running_var, ref_net.bn.running_var, rtol=1e-2, atol=1e-2)
    graphs = "\n".join(p.read_text() for p in tmp_path.rglob("aten_*.py") if "." not in p.stem)
    assert "memory_format = torch.channels_last" in graphs
