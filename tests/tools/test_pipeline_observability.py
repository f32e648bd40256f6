"""Every layer reports through the observability tools: SURGE_DEBUG_DIR folders,
the compile-phase breakdown (explain, perf channel), the kernel counter, and a
progress line that stays quiet off a terminal."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

import surge
from surge.observe import progress
from surge.observe.debug_dir import read_artifacts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# a pipeline step's dump: ``{level}.{k}_{step}.{ext}`` (passes/pipeline.py)
STEP_DUMP = re.compile(r"^(?:backward_)?[a-z_]+\.\d\d_[a-z_]+\.(?:py|txt)$")
ATEN_STEPS = ["01_dce", "02_cse", "03_constant_fold", "04_dce_after_fold"]
SCHEDULE_STEPS = ["schedule.01_fuse.txt", "schedule.02_scatter_stores.txt", "schedule.03_mark_stores.txt",
                  "schedule.04_name_kernels.txt", "schedule.05_plan_memory.txt"]


def summaries(files) -> list:
    """The files of a graph folder other than the pipelines' per-step dumps, in order."""
    return [name for name in files if not STEP_DUMP.match(name)]


def step_dumps(files) -> list:
    return [name for name in files if STEP_DUMP.match(name)]


def aten_steps(level: str) -> list:
    return [f"{level}.{step}.py" for step in ATEN_STEPS]


def mlp(x, w, b):
    return torch.nn.functional.gelu(x @ w + b).sum(-1)


def scaled_tanh(x):
    return torch.tanh(x) * 3


def train_args(seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(8, 16, generator=gen, requires_grad=True),
            torch.randn(16, 16, generator=gen, requires_grad=True),
            torch.randn(16, generator=gen, requires_grad=True)]


def check_training_step(compiled, seed):
    args = train_args(seed)
    expected_args = [a.detach().clone().requires_grad_() for a in args]
    compiled(*args).sum().backward()
    mlp(*expected_args).sum().backward()
    for got, want in zip(args, expected_args):
        torch.testing.assert_close(got.grad, want.grad)


def test_aot_eager_writes_one_folder_per_compiled_graph(monkeypatch, tmp_path):
    monkeypatch.setenv("SURGE_DEBUG_DIR", str(tmp_path))
    check_training_step(surge.compile(mlp, backend="aot_eager"), seed=0)
    x = torch.randn(4, 4)
    torch.testing.assert_close(surge.compile(scaled_tanh, backend="aot_eager")(x), scaled_tanh(x))

    artifacts = read_artifacts(str(tmp_path))
    assert len(artifacts) == 2, list(artifacts)
    (mlp_folder, mlp_files), (tanh_folder, tanh_files) = artifacts.items()
    assert "mlp" in mlp_folder and "scaled_tanh" in tanh_folder
    # Written in pipeline order, each listed once in the folder's index.
    assert summaries(mlp_files) == ["source.py", "graph.py", "aten_forward.py", "aten_backward.py",
                                    "partition.txt", "guards.txt"]
    assert summaries(tanh_files) == ["source.py", "graph.py", "aten_forward.py", "guards.txt"]
    # One dump per pipeline step, in the order they ran, each before the level's summary.
    assert step_dumps(mlp_files) == (["torch.01_attention_masks.py"] + aten_steps("aten_joint")
                                     + aten_steps("aten_forward") + aten_steps("aten_backward"))
    assert step_dumps(tanh_files) == ["torch.01_attention_masks.py"] + aten_steps("aten_inference")
    assert list(mlp_files).index("aten_backward.04_dce_after_fold.py") < list(mlp_files).index("aten_forward.py")
    assert mlp_files["aten_forward.04_dce_after_fold.py"] == mlp_files["aten_forward.py"]
    first_line = mlp.__code__.co_firstlineno
    assert mlp_files["source.py"].startswith(f"# {__file__}:{first_line}\ndef mlp(x, w, b):")
    assert "gelu" in mlp_files["graph.py"] and "aten.mm" in mlp_files["aten_forward.py"]
    assert "aten.tanh" in tanh_files["aten_forward.py"] and "aten_backward.py" not in tanh_files
    # The saved values are the backward graph's inputs before its tangents.
    saved = mlp_files["partition.txt"].splitlines()
    count = int(saved[0].split()[3])
    backward_inputs = mlp_files["aten_backward.py"].split("def forward(self, ", 1)[1].split(")", 1)[0]
    assert count == len(saved) - 1 == backward_inputs.count(":") - 1  # one tangent: the output's
    assert "L['x']" in mlp_files["guards.txt"]
    index = (tmp_path / mlp_folder / "index.txt").read_text()
    assert "aten_backward.py" in index and "(" in index


def test_explain_and_perf_channel_show_each_compile_by_phase(monkeypatch, capsys):
    monkeypatch.setenv("SURGE_LOGS", "perf")
    report = surge.explain(mlp, backend="aot_eager")(*train_args(2))
    (record,) = report.compile_records
    assert record.name == f"mlp (test_pipeline_observability.py:{mlp.__code__.co_firstlineno})"
    assert record.seconds["capture"] > 0 and record.seconds["aot"] > 0
    assert sum(record.seconds.values()) == pytest.approx(record.total, rel=0.05, abs=1e-3)
    text = str(report)
    assert "Compile time by phase" in text and "aot=" in text and "capture=" in text
    assert f"[surge:perf] compile {record.name}: total" in capsys.readouterr().err


TRITON_SCRIPT = """
import json, torch, surge
from surge.observe.phases import phase_timer
from tests.tools.test_pipeline_observability import check_training_step, mlp, scaled_tanh
compiled = surge.compile(mlp, backend="triton")
check_training_step(compiled, seed=0)
check_training_step(compiled, seed=1)
x = torch.randn(4, 32)
with torch.no_grad():
    torch.testing.assert_close(surge.compile(scaled_tanh, backend="triton")(x), scaled_tanh(x))
print(json.dumps({"kernels": surge.counters["kernels"],
                  "records": [r.as_dict() for r in phase_timer.records]}))
"""


def test_triton_backend_writes_loop_ir_schedule_kernels_and_wrapper(tmp_path):
    # Triton decides interpreted-or-compiled at import: a fresh process sets it first.
    # An empty cache folder, so the pipeline runs (a disk-cache hit skips lowering).
    pytest.importorskip("triton")
    debug_dir = tmp_path / "debug"
    env = dict(os.environ, SURGE_DEBUG_DIR=str(debug_dir), SURGE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("SURGE_LOGS", None)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", TRITON_SCRIPT], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])

    artifacts = read_artifacts(str(debug_dir))
    assert len(artifacts) == 2, list(artifacts)
    (_, train), (_, infer) = artifacts.items()
    stages = ["loop_ir.txt", "schedule.txt", "kernels.py", "wrapper.py", "launches.txt"]
    assert summaries(train) == (["source.py", "graph.py", "aten_forward.py", "aten_backward.py", "partition.txt"]
                                + stages + ["backward_" + s for s in stages] + ["guards.txt"])
    assert summaries(infer) == ["source.py", "graph.py", "aten_forward.py"] + stages + ["guards.txt"]
    backend_steps = ["loop_ir.01_fused_forms.txt"] + SCHEDULE_STEPS
    assert step_dumps(train) == (["torch.01_attention_masks.py"] + aten_steps("aten_joint")
                                 + aten_steps("aten_forward") + aten_steps("aten_backward")
                                 + backend_steps + ["backward_" + s for s in backend_steps])
    assert step_dumps(infer) == ["torch.01_attention_masks.py"] + aten_steps("aten_inference") + backend_steps
    # the loop IR after its fused-forms step is what the kernels are generated from: GELU's 1 + erf is one op
    assert "= one_plus_erf(" in train["loop_ir.01_fused_forms.txt"] and "= erf(" not in train["loop_ir.txt"]
    assert train["schedule.05_plan_memory.txt"] == train["schedule.txt"]
    assert "kernel " in train["schedule.01_fuse.txt"] and "memory" not in train["schedule.01_fuse.txt"].lower()
    # Each kernel in the kernels files is launched by its wrapper and counted once.
    kernel_files = [train["kernels.py"], train["backward_kernels.py"], infer["kernels.py"]]
    jitted = [text.count("@triton.jit\ndef triton_") for text in kernel_files]   # not device functions
    assert all(jitted) and result["kernels"] == sum(jitted)
    assert "def make_call" in train["wrapper.py"] and "@triton.jit" not in train["wrapper.py"]
    assert "KERNELS = " in train["kernels.py"] and "def make_call" not in train["kernels.py"]
    assert "kernel " in train["schedule.txt"] and "input 0" in train["loop_ir.txt"]

    # On a GPU each kernel's first launch (Triton's compile) is a record of its own.
    records = [r for r in result["records"] if not r["name"].startswith("first launch of ")]
    assert [r["name"].split(" (")[0] for r in records] == ["mlp", "scaled_tanh"]
    for record in records:
        for phase in ("capture", "aot", "lowering", "scheduling", "codegen", "kernel_compile"):
            assert record["phases_s"].get(phase, 0) > 0, (record["name"], phase)


def test_progress_line_stays_quiet_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    # Even a compile far past the delay prints nothing: stderr is captured, not a terminal.
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "REFRESH_S", 0.001)
    monkeypatch.delenv("SURGE_LOGS", raising=False)
    check_training_step(surge.compile(mlp, backend="aot_eager"), seed=3)
    assert "surge: compil" not in capsys.readouterr().err
