"""Captures kept on disk (surge/frontend/disk_cache.py): a new process runs a stored
capture only where it means what it meant in the process that stored it.

``surge.reset()`` drops every in-memory entry, so the next call looks on disk as a
fresh process does; one test runs two real processes."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import surge


def _options(tmp_path, **more):
    return {"frontend_cache": True, "cache_dir": str(tmp_path), **more}


def _compile(fn, tmp_path, backend="eager", **more):
    return surge.compile(fn, backend=backend, options=_options(tmp_path, **more))


def _new_process():
    surge.reset()
    surge.counters.reset()


def gelu_affine(x, w, scale=1.0):
    return F.gelu(x @ w) * scale + 1


class Scaled(torch.nn.Module):
    def __init__(self, width, scale):
        super().__init__()
        self.proj = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.scale = scale

    def forward(self, x):
        return self.norm(F.silu(self.proj(x))) * self.scale


class ScaledSubclass(Scaled):
    pass


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Scaled(8, 2.0)

    def forward(self, x):
        return self.inner(x) + 1


class TrainingDependent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        return y * 2 if self.training else y - 1


def with_print(x):
    y = x.sin()
    print("between graphs")
    return y.cos()


def test_a_new_process_runs_the_stored_capture(tmp_path):
    x, w = torch.randn(5, 4), torch.randn(4, 3)
    torch.testing.assert_close(_compile(gelu_affine, tmp_path)(x, w), gelu_affine(x, w))
    assert surge.counters["frames"] == 1 and surge.counters["frontend_disk_hits"] == 0
    assert len(os.listdir(tmp_path / "frontend")) == 1

    _new_process()
    compiled = _compile(gelu_affine, tmp_path)
    for _ in range(2):
        x, w = torch.randn(5, 4), torch.randn(4, 3)
        torch.testing.assert_close(compiled(x, w), gelu_affine(x, w))
    assert surge.counters["frames"] == 0 and surge.counters["graphs"] == 0
    assert surge.counters["frontend_disk_hits"] == 1 and surge.counters["cache_hits"] == 1


def test_stored_guards_still_decide(tmp_path):
    small, large = (torch.randn(2, 4), torch.randn(4, 3)), (torch.randn(6, 4), torch.randn(4, 3))
    _compile(gelu_affine, tmp_path)(*small)
    _new_process()
    compiled = _compile(gelu_affine, tmp_path)
    torch.testing.assert_close(compiled(*large), gelu_affine(*large))  # another shape: captured
    assert surge.counters["frames"] == 1 and surge.counters["frontend_disk_hits"] == 0

    _new_process()
    compiled = _compile(gelu_affine, tmp_path)
    for args in (large, small, large):
        torch.testing.assert_close(compiled(*args), gelu_affine(*args))
    assert surge.counters["frames"] == 0 and surge.counters["frontend_disk_hits"] == 2


def test_keyword_calls_are_stored(tmp_path):
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    _compile(gelu_affine, tmp_path)(x, w, scale=2.0)
    _new_process()
    compiled = _compile(gelu_affine, tmp_path)
    torch.testing.assert_close(compiled(x, w, scale=2.0), gelu_affine(x, w, scale=2.0))
    assert surge.counters["frontend_disk_hits"] == 1
    torch.testing.assert_close(compiled(x, w, scale=3.0), gelu_affine(x, w, scale=3.0))  # guarded value
    assert surge.counters["frames"] == 1


def test_another_module_instance_runs_with_its_own_parameters(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    _compile(Scaled(8, 2.0), tmp_path)(x)

    _new_process()
    other = Scaled(8, 2.0)  # new weights: read from the call, not from the first process
    torch.testing.assert_close(_compile(other, tmp_path)(x), other(x))
    assert surge.counters["frames"] == 0 and surge.counters["frontend_disk_hits"] == 1

    _new_process()
    for model in (Scaled(8, 3.0), ScaledSubclass(8, 2.0)):  # a guarded attribute; another type
        torch.testing.assert_close(_compile(model, tmp_path)(x), model(x))
    assert surge.counters["frontend_disk_hits"] == 0 and surge.counters["frames"] == 2


def test_train_and_eval_modes_do_not_share_a_stored_capture(tmp_path):
    x = torch.randn(4, 8)
    with torch.no_grad():
        _compile(TrainingDependent().eval(), tmp_path)(x)
        _new_process()
        _compile(TrainingDependent().eval(), tmp_path)(x)  # the same mode: stored
        assert surge.counters["frontend_disk_hits"] == 1
        _new_process()
        model = TrainingDependent().train()
        torch.testing.assert_close(_compile(model, tmp_path)(x), model(x))
    assert surge.counters["frontend_disk_hits"] == 0 and surge.counters["frames"] == 1


def test_a_submodule_with_its_own_forward_is_not_taken_for_its_class(tmp_path):
    x = torch.randn(4, 8)
    _compile(Outer(), tmp_path)(x)
    _new_process()
    model = Outer()
    model.inner.forward = lambda inp: inp * 5
    torch.testing.assert_close(_compile(model, tmp_path)(x), x * 5 + 1)
    assert surge.counters["frontend_disk_hits"] == 0 and surge.counters["frames"] == 1


def test_training_step_from_a_stored_capture(tmp_path):
    x = torch.randn(6, 8)
    _compile(Scaled(8, 0.5), tmp_path, backend="aot_eager")(x).sum().backward()

    _new_process()
    model = Scaled(8, 0.5)
    reference = Scaled(8, 0.5)
    reference.load_state_dict(model.state_dict())
    _compile(model, tmp_path, backend="aot_eager")(x).square().sum().backward()
    reference(x).square().sum().backward()
    assert surge.counters["frontend_disk_hits"] == 1
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def _import_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_an_edited_callee_file_drops_the_stored_capture(tmp_path, monkeypatch):
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "disk_cache_callee.py").write_text("def helper(x):\n    return x * 2\n")
    (code_dir / "disk_cache_caller.py").write_text(
        "import disk_cache_callee\n\ndef top(x):\n    return disk_cache_callee.helper(x) + 1\n")
    monkeypatch.syspath_prepend(str(code_dir))
    for name in ("disk_cache_callee", "disk_cache_caller"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    callee = _import_file(code_dir / "disk_cache_callee.py", "disk_cache_callee")
    caller = _import_file(code_dir / "disk_cache_caller.py", "disk_cache_caller")
    x = torch.randn(3)
    torch.testing.assert_close(_compile(caller.top, tmp_path)(x), x * 2 + 1)

    # The same names, the same caller; the callee's text changed (its identity guard
    # would pass: the name now holds the new function).
    path = code_dir / "disk_cache_callee.py"
    path.write_text("def helper(x):\n    return x * 30\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    importlib.reload(callee)
    _new_process()
    torch.testing.assert_close(_compile(caller.top, tmp_path)(x), x * 30 + 1)
    assert surge.counters["frontend_disk_hits"] == 0 and surge.counters["frames"] == 1


def test_frames_split_at_a_graph_break_are_captured_again(tmp_path, capsys):
    x = torch.randn(3)
    _compile(with_print, tmp_path)(x)
    _new_process()
    torch.testing.assert_close(_compile(with_print, tmp_path)(x), x.sin().cos())
    assert surge.counters["frontend_disk_hits"] == 0 and surge.counters["graph_breaks"] == 1


def test_other_options_do_not_share_stored_captures(tmp_path):
    x, w = torch.randn(2, 4), torch.randn(4, 3)
    _compile(gelu_affine, tmp_path)(x, w)
    _new_process()
    _compile(gelu_affine, tmp_path, backend="aot_eager")(x, w)
    _compile(gelu_affine, tmp_path, fallback_random=True)(x, w)
    assert surge.counters["frontend_disk_hits"] == 0 and surge.counters["frames"] == 2


def test_off_switch_and_damaged_records(tmp_path):
    x, w = torch.randn(2, 4), torch.randn(4, 3)
    _compile(gelu_affine, tmp_path)(x, w)
    _new_process()
    _compile(gelu_affine, tmp_path, frontend_cache=False)(x, w)
    assert surge.counters["frontend_disk_hits"] == 0

    (record,) = (tmp_path / "frontend").iterdir()
    record.write_bytes(b"not a pickle")
    _new_process()
    torch.testing.assert_close(_compile(gelu_affine, tmp_path)(x, w), gelu_affine(x, w))
    assert surge.counters["frames"] == 1
    _new_process()
    _compile(gelu_affine, tmp_path)(x, w)  # the capture above replaced the damaged file
    assert surge.counters["frontend_disk_hits"] == 1


_PROCESS = textwrap.dedent("""
    import json, sys
    import torch
    import surge

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 16)
            self.ln = torch.nn.LayerNorm(16)

        def forward(self, x, act="gelu"):
            # a set constant: its order differs between processes (string hashing)
            if act in {"gelu", "relu", "silu", "tanh", "sigmoid"}:
                x = torch.nn.functional.gelu(self.ln(self.fc(x))) + x
            return x

    torch.manual_seed(0)
    model, x = Block(), torch.randn(8, 16)
    out = surge.compile(model)(x)
    print(json.dumps({
        "frames": surge.counters["frames"], "disk_hits": surge.counters["frontend_disk_hits"],
        "graph_cache_hits": surge.counters["graph_cache_hits"],
        "sympy": "sympy" in sys.modules,
        "error": (out - model(x)).abs().max().item(),
    }))
""")


def test_a_warm_process_skips_capture_and_torchs_symbolic_shapes(tmp_path):
    script = tmp_path / "block_script.py"
    script.write_text(_PROCESS)
    env = {**os.environ, "SURGE_CACHE_DIR": str(tmp_path / "cache"), "SURGE_FRONTEND_CACHE": "1"}
    runs = []
    for seed in ("1", "2"):
        env["PYTHONHASHSEED"] = seed
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["frames"] == 1 and cold["disk_hits"] == 0
    assert warm["frames"] == 0 and warm["disk_hits"] == 1 and warm["graph_cache_hits"] == 1
    assert not warm["sympy"]  # capture's meta kernels are what import it
    assert cold["error"] < 1e-5 and warm["error"] < 1e-5
