"""The disk cache (a second process loads the library without compiling), the missing-compiler
fallback to aot_eager, and the backend entry through surge.compile (inference and training)."""
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import surge
from surge.backends import cpp as cpp_backend_module
from surge.backends.cpp import CompilerUnavailable, compile_aten_graph_cpp, cpp_backend

from .helpers import aten_graph, randn

CHILD = r'''
import json, sys, torch
from torch.fx.experimental.proxy_tensor import make_fx
import torch._decomp
from surge.backends.cpp import compile_aten_graph_cpp
fn = lambda x, w: torch.softmax(x * w, -1) + x.amax(-1, keepdim=True)
x, w = torch.randn(6, 33), torch.randn(33)
gm = make_fx(fn, decomposition_table=torch._decomp.core_aten_decompositions())(x, w)
c = compile_aten_graph_cpp(gm, [x, w])
torch.testing.assert_close(c(x, w), fn(x, w))
print(json.dumps({"compiled": c.compiled, "module_hit": c.cache_hit}))
'''


def _run_child(cache_dir):
    env = dict(os.environ, SURGE_CACHE_DIR=str(cache_dir))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_loads_without_compiling(tmp_path):
    first = _run_child(tmp_path)
    assert first == {"compiled": True, "module_hit": False}
    libraries = [f for f in os.listdir(tmp_path / "cpp") if f.endswith(".so")]
    assert len(libraries) == 1 and not [f for f in os.listdir(tmp_path / "cpp") if f.endswith(".tmp")]
    second = _run_child(tmp_path)
    assert second == {"compiled": False, "module_hit": True}


def test_missing_compiler_warns_once_and_falls_back_to_aot_eager(monkeypatch):
    monkeypatch.setenv("SURGE_CXX", "surge-no-such-compiler")
    monkeypatch.setattr(cpp_backend_module, "_WARNED", set())

    def fn(x):
        return F.gelu(x) * 2
    gm = torch.fx.symbolic_trace(fn)
    with pytest.warns(RuntimeWarning, match="no working C\\+\\+ compiler 'surge-no-such-compiler'.*aot_eager"):
        compiled = cpp_backend(gm, [randn(3, 4)])
    x = randn(3, 4)
    torch.testing.assert_close(compiled(x), fn(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cpp_backend(gm, [randn(3, 4)])     # the second time: no second warning
    with pytest.raises(CompilerUnavailable, match="SURGE_CXX"):
        compile_aten_graph_cpp(aten_graph(fn, x), [x], cxx="surge-no-such-compiler")


def test_surge_compile_with_cpp_backend_inference_and_training():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
    compiled = surge.compile(model, backend="cpp")
    x = randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    xi = randn(4, 16).requires_grad_()
    compiled(xi).square().sum().backward()
    got = xi.grad.clone()
    xi.grad = None
    model(xi).square().sum().backward()
    torch.testing.assert_close(got, xi.grad, atol=1e-4, rtol=1e-4)
    assert surge.counters["graphs"] >= 1 and surge.counters["fallbacks"] == 0
    assert surge.counters["kernels"] >= 2, "forward and backward kernels are counted"
