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
