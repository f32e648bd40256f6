"""Runtime: the disk cache of generated modules across processes, debug dumps, log channels."""
import os
import subprocess
import sys
import textwrap

import torch

from surge.observe.debug_dir import read_artifacts

from .helpers import compile_fn, randn

PROGRAM = textwrap.dedent("""
    import json, sys, time, torch, torch._decomp
    from torch.fx.experimental.proxy_tensor import make_fx
    from surge.backends.triton import compile_aten_graph
    def fn(x, w):
        return torch.nn.functional.gelu(torch.layer_norm(x, (32,), w, None)) * 2
    x, w = torch.randn(4, 32), torch.randn(32)
    gm = make_fx(fn, decomposition_table=torch._decomp.core_aten_decompositions())(x, w)
    c = compile_aten_graph(gm, [x, w])
    ok = torch.allclose(c(x, w), fn(x, w), atol=1e-5)
    print(json.dumps({"hit": c.cache_hit, "seconds": c.compile_seconds, "ok": ok}))
""")


def _run(cache_dir):
    env = dict(os.environ, SURGE_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    import json
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_loads_compiled_module_from_disk(tmp_path):
    first = _run(tmp_path)
    second = _run(tmp_path)
    assert first["ok"] and second["ok"]
    assert not first["hit"] and second["hit"]
    modules = [f for f in os.listdir(tmp_path / "graphs") if f.endswith(".py")]
    assert len(modules) == 1 and (tmp_path / "graphs" / (modules[0] + ".sum")).exists()  # and its integrity record


def test_debug_dir_and_output_code_log(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("SURGE_DEBUG_DIR", str(tmp_path / "dbg"))
    monkeypatch.setenv("SURGE_LOGS", "schedule,output_code")
    c = compile_fn(lambda x: x.relu() * 3 + 1, randn(5, 3))
    (files,) = read_artifacts(str(tmp_path / "dbg")).values()  # one folder: one compiled graph
    # each pipeline step's dump (docs/observability.md), then the level's summary
    assert list(files) == ["loop_ir.01_fused_forms.txt", "loop_ir.txt", "schedule.01_fuse.txt",
                           "schedule.02_scatter_stores.txt", "schedule.03_mark_stores.txt",
                           "schedule.04_name_kernels.txt", "schedule.05_plan_memory.txt", "schedule.txt",
                           "kernels.py", "wrapper.py", "launches.txt"]
    assert files["launches.txt"].splitlines() == [
        "input arg0: float32[5, 3] stride=[3, 1] offset=0",
        "kernel triton_fused_relu_mul_add_0(arg0) -> buf0",
        "output buf0: float32[5, 3] stride=[3, 1]"]
    assert c.source.startswith(files["kernels.py"]) and c.source.endswith(files["wrapper.py"])
    err = capfd.readouterr().err
    assert "[surge:schedule]" in err and "[surge:output_code]" in err and "@triton.jit" in err


def test_generated_module_is_readable():
    c = compile_fn(lambda x, y: torch.nn.functional.gelu(x + y), randn(4, 4), randn(4))
    assert "def triton_fused_add_gelu(" in c.source and "triton_fused_add_gelu_0 = kernels[" in c.source
    assert "def call(args):" in c.source and "empty_strided(" in c.source
    # a broadcast bias keeps two loop dims; a plain contiguous read merges to one
    assert "x0 = (xindex // 4)" in c.source and "x1 = xindex % 4" in c.source
    torch.testing.assert_close(c(randn(4, 4), randn(4)).shape, torch.Size([4, 4]))


def test_a_graph_that_cannot_be_compiled_runs_eagerly_or_raises(monkeypatch):
    import pytest

    from surge.backends.triton import compile_aten_graph
    from surge.lowering import lower
    from surge.options import Options

    from .helpers import aten_graph

    def broken(*args, **kwargs):
        raise RuntimeError("lowering bug")
    monkeypatch.setattr(lower, "lower_graph", broken)
    x = randn(3, 3)
    gm = aten_graph(lambda t: t * 2 + 1, x)
    runner = compile_aten_graph(gm, [x], Options(cache_dir=None))
    torch.testing.assert_close(runner(x), x * 2 + 1)
    with pytest.raises(RuntimeError, match="lowering bug"):
        compile_aten_graph(gm, [x], Options(raise_internal_errors=True))


def test_input_mutation_through_torch_compile():
    from surge.backends.triton import triton_backend

    def f(x, y):
        x.add_(y * 2)
        return x.sin()
    a, b = randn(4, 5), randn(4, 5)
    a2 = a.clone()
    out = torch.compile(f, backend=triton_backend)(a, b)
    expected = f(a2, b)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(a, a2)
