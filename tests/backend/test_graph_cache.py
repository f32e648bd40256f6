"""The compiled-graph cache: exact keys, warm hits equal to eager (inference and
training), damaged entries recompiled, racing writers, the switch to turn it off,
a fresh process that loads without lowering, and capture that leaves Dynamo unimported."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import surge
from surge.options import CompileConfig, Options
from surge.target import cpp_target
from surge.backends import graph_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path))
    return tmp_path


def entries(cache_dir) -> list:
    folder = cache_dir / "graph_cache"
    return sorted(os.listdir(folder)) if folder.exists() else []


# ---------------------------------------------------------------- keys

def _key(fn, *inputs, variant=(False, ()), knobs=("cpp",)):
    return graph_cache.graph_key(torch.fx.symbolic_trace(fn), list(inputs), variant, knobs)


def _block(x, w):
    return F.gelu(x @ w) + 1.0


def test_key_is_stable_within_and_across_processes():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    graph_cache.versions_fingerprint.cache_clear()  # surge's sources now, as the child will read them
    key = _key(_block, x, w)
    assert key is not None and key == _key(_block, torch.randn(4, 8), torch.randn(8, 8))
    child = ("import torch, torch.nn.functional as F\nfrom surge.backends import graph_cache\n"
             "def _block(x, w):\n    return F.gelu(x @ w) + 1.0\n"
             "print(graph_cache.graph_key(torch.fx.symbolic_trace(_block), "
             "[torch.randn(4, 8), torch.randn(8, 8)], (False, ()), ('cpp',)))\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == key


def test_every_change_the_result_depends_on_changes_the_key():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    base = _key(_block, x, w)
    keys = {
        "graph": _key(lambda x, w: F.relu(x @ w) + 1.0, x, w),
        "literal": _key(lambda x, w: F.gelu(x @ w) + 2.0, x, w),
        "shape": _key(_block, torch.randn(5, 8), w),
        "stride": _key(_block, torch.randn(8, 4).t(), w),
        "offset": _key(_block, torch.randn(33)[1:].view(4, 8), w),
        "dtype": _key(_block, x.double(), w.double()),
        "requires_grad": _key(_block, x.clone().requires_grad_(), w),
        "variant": _key(_block, x, w, variant=(True, ())),
        "knobs": _key(_block, x, w, knobs=("cpp", "another compiler")),
    }
    with torch.no_grad():
        keys["grad mode"] = _key(_block, x, w)
    torch.set_default_dtype(torch.float64)
    keys["default dtype"] = _key(_block, x, w)
    torch.set_default_dtype(torch.float32)
    assert None not in keys.values()
    assert len(set(keys.values()) | {base}) == len(keys) + 1, keys

    # A tensor baked into the graph is keyed by its bytes, not by its (elided) repr.
    big = torch.zeros(100)
    graph = torch.fx.symbolic_trace(lambda x: x + 1)
    add = next(n for n in graph.graph.nodes if n.op == "call_function")
    add.args = (add.args[0], big)
    graph.recompile()
    before = graph_cache.graph_key(graph, [torch.randn(100)], (), ())
    big[57] = 1.0
    assert graph_cache.graph_key(graph, [torch.randn(100)], (), ()) != before


def test_options_change_the_key():
    """The spec keys by the compile's one config key (every code-changing option and the
    target: tests/backend/test_compile_config.py checks each field)."""
    gm, inputs = torch.fx.symbolic_trace(_block), [torch.randn(4, 8), torch.randn(8, 8)]

    def key(**options):
        config = CompileConfig.from_options(Options(**options))
        return graph_cache.CacheSpec("unused", config.cache_key(cpp_target()), None).key(gm, inputs, ())
    assert key(fallback_random=True) != key(fallback_random=False)
    assert key(debug_dir="/somewhere") == key()


def test_what_the_key_cannot_describe_is_not_cached():
    local_scale = torch.randn(1)

    def local_fn(t):
        return t * local_scale
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.target = local_fn
    node.args = (node.args[0],)
    gm.recompile()
    assert graph_cache.graph_key(gm, [torch.randn(3)], (), ()) is None
    submodule_call = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(3, 3)))
    assert any(n.op == "call_module" for n in submodule_call.graph.nodes)
    assert graph_cache.graph_key(submodule_call, [torch.randn(2, 3)], (), ()) is None


# ---------------------------------------------------------------- warm hits

def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 8))


def _train_step(model, x):
    out = model(x)
    out.square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    return out.detach(), grads


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_warm_hit_equals_eager_for_inference_and_training(backend, cache_dir):
    model = _mlp()
    x = torch.randn(4, 16)
    with torch.no_grad():
        surge.compile(model, backend=backend)(x)
    x_train = torch.randn(4, 16, requires_grad=True)
    _train_step(surge.compile(model, backend=backend), x_train)
    assert surge.counters["graph_cache_misses"] == 2 and len(entries(cache_dir)) == 2

    surge.reset()
    surge.counters.reset()
    warm = surge.compile(model, backend=backend)
    fresh = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(warm(fresh), model(fresh), rtol=1e-5, atol=1e-5)
    fresh_train = torch.randn(4, 16, requires_grad=True)
    got_out, got_grads = _train_step(warm, fresh_train)
    want_out, want_grads = _train_step(model, fresh_train)
    torch.testing.assert_close(got_out, want_out, rtol=1e-5, atol=1e-5)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert surge.counters["graph_cache_hits"] == 2 and surge.counters["graph_cache_misses"] == 0
    assert surge.counters["kernels"] > 0  # loaded graphs count their kernels as compiled ones do


def test_changed_inputs_miss(cache_dir):
    def fn(x, y):
        return torch.softmax(x * y, -1)
    compiled = surge.compile(fn, backend="cpp")
    calls = [(torch.randn(4, 8), torch.randn(4, 8)),
             (torch.randn(4, 9), torch.randn(4, 9)),                  # shape
             (torch.randn(8, 4).t(), torch.randn(4, 8)),              # stride
             (torch.randn(4, 8).double(), torch.randn(4, 8).double()),  # dtype
             (torch.randn(4, 8, requires_grad=True), torch.randn(4, 8))]  # requires_grad
    for x, y in calls:
        surge.reset()
        torch.testing.assert_close(compiled(x, y), fn(x, y))
    assert surge.counters["graph_cache_hits"] == 0
    assert len(entries(cache_dir)) == len(calls)


def test_damaged_entries_are_recompiled_not_crashed_on(cache_dir):
    def fn(x):
        return F.silu(x) * 3
    x = torch.randn(5, 7)
    surge.compile(fn, backend="cpp")(x)
    (name,) = entries(cache_dir)
    path = cache_dir / "graph_cache" / name
    good = path.read_bytes()
    for damaged in (b"not a pickle", good[: len(good) // 2], b""):
        path.write_bytes(damaged)
        surge.reset()
        surge.counters.reset()
        fresh = torch.randn(5, 7)
        torch.testing.assert_close(surge.compile(fn, backend="cpp")(fresh), fn(fresh))
        assert surge.counters["graph_cache_misses"] == 1
        assert path.read_bytes() != damaged  # the recompile wrote a whole entry back
    # An entry whose kernel library went missing is rebuilt from the stored source.
    for so in (cache_dir / "cpp").glob("*.so"):
        so.unlink()
    from surge.runtime import cpp_build
    cpp_build._LOADED.clear()
    surge.reset()
    surge.counters.reset()
    torch.testing.assert_close(surge.compile(fn, backend="cpp")(x), fn(x))
    assert surge.counters["graph_cache_hits"] == 1 and surge.counters["cpp_compiles"] == 1


def test_the_switch_turns_it_off(cache_dir, monkeypatch):
    def fn(x):
        return x.exp() + 1
    x = torch.randn(3, 3)
    torch.testing.assert_close(surge.compile(fn, backend="cpp", options={"graph_cache": False})(x), fn(x))
    monkeypatch.setenv("SURGE_GRAPH_CACHE", "0")
    surge.reset()
    torch.testing.assert_close(surge.compile(fn, backend="cpp")(x), fn(x))
    assert entries(cache_dir) == []


# ---------------------------------------------------------------- fresh processes

CHILD = r'''
import json, sys, torch
import surge
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
compiled = surge.compile(model, backend="cpp")
x = torch.randn(4, 16, requires_grad=True)
compiled(x).sum().backward()
got = x.grad.clone()
x.grad = None
model(x).sum().backward()
torch.testing.assert_close(got, x.grad, rtol=1e-4, atol=1e-5)
print(json.dumps({"hits": surge.counters["graph_cache_hits"],
                  "loaded": sorted(m for m in ("torch._dynamo", "surge.lowering", "surge.schedule",
                                               "surge.codegen", "surge.passes.cse", "triton") if m in sys.modules)}))
'''


def _children(cache_dir, count: int) -> list:
    env = dict(os.environ, SURGE_CACHE_DIR=str(cache_dir),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(count)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_racing_processes_then_a_warm_process_that_loads_without_lowering(tmp_path):
    racers = _children(tmp_path, 2)
    assert all(r["hits"] == 0 for r in racers)
    assert "torch._dynamo" not in racers[0]["loaded"]  # capture and tracing leave Dynamo unimported
    assert [f for f in os.listdir(tmp_path / "graph_cache") if not f.endswith(".pkl")] == []
    (warm,) = _children(tmp_path, 1)
    assert warm == {"hits": 1, "loaded": []}


TORCH_COMPILE_AFTER_SURGE = r'''
import sys, torch
import surge
def fn(x):
    return torch.nn.functional.gelu(x).softmax(-1) * 2
x = torch.randn(4, 8)
torch.testing.assert_close(surge.compile(fn, backend="cpp")(x), fn(x))
assert "torch._dynamo" not in sys.modules
y = torch.randn(4, 8, requires_grad=True)
out = torch.compile(fn, backend="aot_eager")(y)   # Dynamo, fake tensors and functionalization after surge
out.sum().backward()
ref = y.detach().requires_grad_()
fn(ref).sum().backward()
torch.testing.assert_close(out, fn(y))
torch.testing.assert_close(y.grad, ref.grad)
print("ok")
'''


def test_torch_compile_still_works_after_surge_deferred_dynamo(tmp_path):
    env = dict(os.environ, SURGE_CACHE_DIR=str(tmp_path),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", TORCH_COMPILE_AFTER_SURGE], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
