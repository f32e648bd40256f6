"""The backend registry: names, the default backend, options reaching surge's backends."""
import pytest
import torch

import surge
from surge.backends import available_backends, default_backend_name, lookup_backend
from surge.backends.default import graph_device_type


def block(x, w, b, r):
    return torch.nn.functional.gelu(x @ w + b) + r


def block_args():
    return torch.randn(8, 16), torch.randn(16, 16), torch.randn(16), torch.randn(8, 16)


def test_every_named_backend_is_registered():
    assert {"default", "eager", "aot_eager", "cpp", "triton"} <= set(available_backends())


def test_default_backend_generates_kernels_for_the_graphs_device():
    assert default_backend_name() == "default"
    assert graph_device_type([torch.randn(2), 3]) == "cpu"
    assert graph_device_type([torch.randn(2, device="meta")]) == "cpu"


def test_default_backend_matches_eager_on_cpu():
    compiled = surge.compile(block)
    for _ in range(2):
        args = block_args()
        torch.testing.assert_close(compiled(*args), block(*args))
    assert surge.counters["fallbacks"] == 0


def test_surge_backend_serves_torch_compile():
    compiled = torch.compile(block, backend=surge.backend)
    args = block_args()
    torch.testing.assert_close(compiled(*args), block(*args))


def test_options_reach_surges_own_backends():
    seen = []

    def fake(gm, example_inputs, *, options=None):
        seen.append(options)
        return gm.forward

    surge.backends.register_backend("options_probe", f"{__name__}:_probe")
    globals()["_probe"] = fake
    compiled = surge.compile(block, backend="options_probe", options={"fallback_random": True})
    compiled(*block_args())
    assert seen and seen[0].fallback_random is True


def test_the_same_options_share_one_bound_backend():
    options = surge.api.build_options(backend="aot_eager", fullgraph=False, dynamic=None, mode=None, options=None)
    assert lookup_backend("aot_eager", options) is lookup_backend("aot_eager", options)


def test_bad_backend_name_is_refused_at_compile_time():
    with pytest.raises(ValueError, match="unknown backend"):
        surge.compile(block, backend="nope")


def test_options_may_name_the_backend_and_the_other_keywords():
    compiled = surge.compile(block, options={"backend": "eager", "fullgraph": True})
    compiled(*block_args())
    assert surge.counters["kernels"] == 0   # the eager backend ran, not the default one
    options = surge.api.build_options(backend=None, fullgraph=False, dynamic=None, mode=None,
                                      options={"fullgraph": True, "mode": "reduce-overhead", "dynamic": False})
    assert options.fullgraph is True and options.cudagraphs is True and options.dynamic is False
    with pytest.raises(ValueError, match="disagree"):
        surge.compile(block, backend="cpp", options={"backend": "eager"})
    with pytest.raises(ValueError, match="is not a mode"):
        surge.compile(block, options={"mode": "fastest"})
    with pytest.raises(ValueError, match="unknown backend"):
        surge.compile(block, options={"backend": "nope"})
