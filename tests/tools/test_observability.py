"""SURGE_LOGS channels and SURGE_DEBUG_DIR produce their artifacts through surge.compile."""
import os
import subprocess
import sys

import pytest
import torch

import surge
from surge.observe.debug_dir import INDEX_FILE
from surge.tools.workloads import layernorm_gelu, seed_block


def branchy(x):
    y = torch.sin(x)
    if y.sum() > 0:  # data-dependent: cannot be captured
        return y + 1
    return y - 1


def run_logged(monkeypatch, capsys, channels, fn, *calls, backend=None):
    monkeypatch.setenv("SURGE_LOGS", channels)
    compiled = surge.compile(fn, backend=backend)
    for args in calls:
        torch.testing.assert_close(compiled(*args), fn(*args))
    return capsys.readouterr().err


def block_args(n=8):
    return [torch.randn(n, n), torch.randn(n, n), torch.randn(n), torch.randn(n, n)]


def test_frontend_channels_print_graph_guards_bytecode_and_recompiles(monkeypatch, capsys):
    err = run_logged(monkeypatch, capsys, "graph,guards,bytecode,recompiles", seed_block,
                     block_args(8), block_args(16))
    for channel in ("graph", "guards", "bytecode", "recompiles"):
        assert f"[surge:{channel}]" in err, channel
    graph_text = err.split("[surge:graph]", 1)[1]
    assert "gelu" in graph_text and "matmul" in graph_text
    assert "shape=[8, 8]" in err or "[8, 8]" in err  # the guard on the first call's shape


def test_channels_stay_quiet_unless_selected(monkeypatch, capsys):
    err = run_logged(monkeypatch, capsys, "", seed_block, block_args(8))
    assert "[surge:" not in err


def test_a_graph_break_or_fallback_is_logged_with_reason_and_user_line(monkeypatch, capsys):
    err = run_logged(monkeypatch, capsys, "graph_breaks,fallbacks", branchy, (torch.randn(4, 4),))
    channel = "graph_breaks" if surge.counters["graph_breaks"] else "fallbacks"
    assert f"[surge:{channel}]" in err
    assert "test_observability.py" in err and "if y.sum() > 0" in err


def test_aot_and_perf_channels_with_the_aot_backend(monkeypatch, capsys):
    err = run_logged(monkeypatch, capsys, "aot,perf", seed_block, block_args(8), backend="aot_eager")
    assert "[surge:aot]" in err and "aten." in err
    assert "[surge:perf]" in err


def test_schedule_and_output_code_channels_with_the_triton_backend(tmp_path):
    # Triton decides interpreted-or-compiled at import: a fresh process sets it first.
    # An empty cache folder, so the schedule is made (a cache hit would skip it).
    pytest.importorskip("triton")
    code = (
        "import torch, surge\n"
        "from surge.backends.triton import triton_backend\n"
        "from surge.tools.workloads import layernorm_gelu\n"
        "x = [torch.randn(8, 32), torch.randn(32), torch.randn(32)]\n"
        "out = surge.compile(layernorm_gelu, backend=triton_backend)(*x)\n"
        "torch.testing.assert_close(out, layernorm_gelu(*x))\n"
    )
    env = dict(os.environ, SURGE_LOGS="schedule,output_code", SURGE_CACHE_DIR=str(tmp_path))
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[surge:schedule]" in proc.stderr and "[surge:output_code]" in proc.stderr
    assert "@triton.jit" in proc.stderr


def test_debug_dir_written_by_the_pipeline_follows_the_layout(monkeypatch, tmp_path):
    monkeypatch.setenv("SURGE_DEBUG_DIR", str(tmp_path))
    compiled = surge.compile(layernorm_gelu, backend="aot_eager")
    x = [torch.randn(8, 32), torch.randn(32), torch.randn(32)]
    torch.testing.assert_close(compiled(*x), layernorm_gelu(*x))
    written = os.listdir(tmp_path)
    # Every artifact lives in a graph folder listed in the top index, with its own index.
    assert INDEX_FILE in written
    with open(tmp_path / INDEX_FILE) as f:
        folders = [line.rstrip("/") for line in f.read().split()]
    assert sorted(folders) == sorted(w for w in written if w != INDEX_FILE)
    for folder in folders:
        assert (tmp_path / folder / INDEX_FILE).exists()
