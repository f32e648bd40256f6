"""Dynamic shapes end to end on the kernel backends: ``surge.compile`` with the default
backend (cpp on the CPU), Triton under its interpreter at tiny sizes, and
``torch.compile(f, backend=surge.backend)``.

Every program runs over about 10 sizes against eager on fresh inputs and counts graphs
and recompiles (a static graph, then one dynamic graph: at most 2, as torch.compile
makes), the kernels compiled after the dynamic graph (none) and the variants that a
broken backend guard compiled (none, except where a test breaks one on purpose).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import surge
from surge.counters import counters

from .helpers import DEVICE   # Triton's tensors: the GPU when there is one, else interpreted on the CPU


def _close(a, b, tol=1e-4):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    else:
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y, tol)


def _graphs_and_recompiles():
    return counters["graphs"], counters["recompiles"]


def _run(compiled, fn, make_inputs, sizes, tol=1e-4):
    """Each size against eager; no kernel is compiled after the dynamic graph (third size on)."""
    kernels = None
    for k, size in enumerate(sizes):
        inputs = make_inputs(size)
        _close(compiled(*inputs), fn(*inputs), tol)
        if k == 1:
            kernels = counters["kernels"]
    assert counters["kernels"] == kernels, "a later size compiled kernels again"
    assert counters["size_variants"] == 0 and counters["static_fallbacks"] == 0
    assert counters["fallbacks"] == 0


SIZES = [3, 5, 7, 2, 9, 4, 12, 6, 10, 8]


def test_mlp_over_batch_sizes():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    with torch.no_grad():
        _run(surge.compile(mlp), mlp, lambda b: (torch.randn(b, 8),), SIZES)
    assert _graphs_and_recompiles() == (2, 1)


def _attention(qkv, proj):
    def block(x):
        b, t, c = x.shape
        h = F.layer_norm(x, (c,))
        q, k, v = qkv(h).split(c, dim=2)
        q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + proj(y.transpose(1, 2).reshape(b, t, c)).softmax(-1)
    return block


def test_attention_block_over_sequence_lengths():
    torch.manual_seed(0)
    block = _attention(torch.nn.Linear(16, 48), torch.nn.Linear(16, 16))
    with torch.no_grad():
        _run(surge.compile(block), block, lambda t: (torch.randn(2, t, 16),), SIZES)
    assert _graphs_and_recompiles() == (2, 1)


def test_two_dims_varying_together():
    def f(x, y):
        b, t, c = x.shape
        return (x.reshape(b * t, c) * 2).sum(-1).view(b, t) + y.softmax(-1), x.mean((0, 1))

    pairs = [(2, 3), (3, 5), (4, 2), (5, 7), (2, 9), (6, 4), (3, 3), (7, 6), (4, 8), (5, 5)]
    _run(surge.compile(f), f, lambda bt: (torch.randn(*bt, 6), torch.randn(*bt)), pairs)
    assert _graphs_and_recompiles() == (2, 1)


def test_dynamic_true_compiles_one_graph():
    def f(x, w):
        return torch.relu(x @ w).sum(-1) * x.shape[0]

    _run(surge.compile(f, dynamic=True), f, lambda b: (torch.randn(b, 8), torch.randn(8, 4)), SIZES)
    assert _graphs_and_recompiles() == (1, 0)


def test_sizes_zero_and_one_stay_specialized():
    def f(x):
        return (x * 2).sum(0) + x.sum(1).mean()

    compiled = surge.compile(f)
    for b in [3, 5, 1, 7, 1, 4, 9]:
        x = torch.randn(b, 4)
        _close(compiled(x), f(x))
    empty = torch.randn(0, 4)
    torch.testing.assert_close(compiled(empty), f(empty), equal_nan=True)
    # 3 (static), 5 (dynamic, every b >= 2), 1 (its own graph), 0 (its own graph)
    assert _graphs_and_recompiles() == (4, 3)


def test_decode_loop_with_a_growing_cache():
    torch.manual_seed(0)
    proj = torch.nn.Linear(8, 8)

    def step(cache, x):
        cache = torch.cat([cache, proj(x)], dim=1)
        scores = (x @ cache.transpose(1, 2)).softmax(-1)
        return cache, scores @ cache

    compiled = surge.compile(step)
    cache, ref_cache = torch.randn(2, 2, 8), None
    ref_cache = cache
    with torch.no_grad():
        for _ in range(10):
            x = torch.randn(2, 1, 8)
            cache, out = compiled(cache, x)
            ref_cache, ref = step(ref_cache, x)
            _close(out, ref)
            _close(cache, ref_cache)
    assert _graphs_and_recompiles() == (2, 1)
    assert counters["size_variants"] == 0 and counters["fallbacks"] == 0


def test_training_with_a_varying_batch_gradients_equal():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.LayerNorm(12),
                                torch.nn.Linear(12, 1))
    reference = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.LayerNorm(12),
                                    torch.nn.Linear(12, 1))
    reference.load_state_dict(model.state_dict())
    compiled = surge.compile(model)
    for b in SIZES:
        x = torch.randn(b, 6)
        compiled(x).pow(2).mean().backward()
        reference(x).pow(2).mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert _graphs_and_recompiles() == (2, 1)
    assert counters["size_variants"] == 0 and counters["fallbacks"] == 0


@pytest.mark.slow   # ~19 s on a loaded 2-core machine: capture and compile of a whole model
def test_gpt2_over_sequence_lengths():
    """dynamic=True: one compile of the whole model (the static-then-dynamic count is the
    smaller programs' above), right at every length."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).eval()
    compiled = surge.compile(model, dynamic=True)
    with torch.no_grad():
        for seq in [3, 5, 8, 4, 11, 6, 9, 2, 13, 7]:
            ids = torch.randint(0, 64, (2, seq))
            _close(compiled(input_ids=ids, use_cache=False).logits, model(input_ids=ids, use_cache=False).logits)
    assert _graphs_and_recompiles() == (1, 0)
    assert counters["static_fallbacks"] == 0 and counters["fallbacks"] == 0


def test_a_broken_backend_guard_compiles_a_variant(monkeypatch, capsys, tmp_path):
    """Triton (interpreted): a persistent reduction guards its row's length (one Triton
    block, made tiny here); a longer row gets one variant, logged, right results."""
    import surge.codegen.triton.kernel as triton_kernel

    monkeypatch.setattr(triton_kernel, "TRITON_MAX_BLOCK", 16)
    monkeypatch.setenv("SURGE_LOGS", "dynamic")
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path))   # the patched limit is no part of the code key

    def f(x):
        return torch.softmax(x * 2, -1)

    compiled = surge.compile(f, backend="triton")
    for n in [4, 6, 9, 20, 33, 5, 17]:
        x = torch.randn(3, n, device=DEVICE)
        _close(compiled(x), f(x))
    assert _graphs_and_recompiles() == (2, 1)
    assert counters["size_variants"] == 1 and counters["fallbacks"] == 0
    assert "break a guard of a graph compiled for symbolic sizes (compiled for sizes with 16 - s0 >= 0)" in \
        capsys.readouterr().err


def test_an_op_that_needs_static_sizes_compiles_the_graph_per_sizes(monkeypatch, capsys):
    """``interpolate`` with a scale computes its output size as a float of the symbolic
    size, which lowering has no form for: that graph compiles per sizes (logged once,
    with the reason), never an eager frame."""
    monkeypatch.setenv("SURGE_LOGS", "dynamic")

    def f(x):
        return F.interpolate(x, scale_factor=2.0) * 2

    compiled = surge.compile(f, dynamic=True)
    for n in [3, 5, 3]:
        x = torch.randn(1, 2, n)
        _close(compiled(x), f(x))
    assert _graphs_and_recompiles() == (1, 0)
    assert counters["static_fallbacks"] == 1 and counters["fallbacks"] == 0
    err = capsys.readouterr().err
    assert err.count("the graph is compiled per concrete sizes: LoweringError") == 1 and "SymFloat" in err


def test_triton_mlp():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).to(DEVICE)
    with torch.no_grad():
        _run(surge.compile(mlp, backend="triton"), mlp, lambda b: (torch.randn(b, 4, device=DEVICE),), [3, 5, 2, 7])
    assert _graphs_and_recompiles() == (2, 1)


@pytest.mark.parametrize("dynamic", [None, True])
def test_torch_compile_hands_symbolic_graphs_to_surge(dynamic):
    """Dynamo's symbolic graph: its symbols rebuilt on surge's shape environment, one
    compiled graph for every later size (forward and backward)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return surge.backend(gm, example_inputs)

    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend=backend, dynamic=dynamic)
        kernels = None
        for k, b in enumerate([3, 5, 7, 2, 9, 4]):
            x = torch.randn(b, 8, requires_grad=True)
            out = compiled(x)
            out.sum().backward()
            grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
            model.zero_grad()
            x.grad = None
            ref = model(x)
            ref.sum().backward()
            _close(out, ref)
            _close(grads, [p.grad for p in model.parameters()] + [x.grad])
            model.zero_grad()
            if k == 1:
                kernels = counters["kernels"]
        assert counters["kernels"] == kernels
    finally:
        torch._dynamo.reset()
    assert len(graphs) == (2 if dynamic is None else 1)
    assert counters["static_fallbacks"] == 0 and counters["size_variants"] == 0


_PROCESS = """
import json, sys
import torch
import surge

def block(x, w):
    b, t, c = x.shape
    h = torch.nn.functional.layer_norm(x, (c,))
    return (h @ w).softmax(-1).view(b * t, -1).sum(0) + h.mean()

torch.manual_seed(0)
w = torch.randn(8, 8)
compiled = surge.compile(block, dynamic=True)
error = 0.0
for t in [int(a) for a in sys.argv[1:]]:
    x = torch.randn(2, t, 8)
    error = max(error, (compiled(x, w) - block(x, w)).abs().max().item())
print(json.dumps({"frames": surge.counters["frames"], "disk_hits": surge.counters["frontend_disk_hits"],
                  "graphs": surge.counters["graphs"], "cpp_compiles": surge.counters["cpp_compiles"],
                  "error": error}))
"""


@pytest.mark.slow   # two fresh processes (~25 s on a loaded 2-core machine)
def test_a_new_process_reuses_the_dynamic_graph(tmp_path):
    """The dynamic capture is stored (its shape environment as data); a new process's
    first call at a size the capture never saw runs the stored dynamic entry: no capture,
    its module from the code cache (keyed by the symbolic form), no compiler run."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "dynamic_script.py"
    script.write_text(_PROCESS)
    env = {**os.environ, "SURGE_CACHE_DIR": str(tmp_path / "cache"), "SURGE_FRONTEND_CACHE": "1"}
    runs = []
    for seed, sizes in (("1", ["3", "5"]), ("2", ["9", "4"])):
        env["PYTHONHASHSEED"] = seed
        done = subprocess.run([sys.executable, str(script), *sizes], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["frames"] == 1 and cold["graphs"] == 1 and cold["disk_hits"] == 0
    assert warm["frames"] == 0 and warm["graphs"] == 0 and warm["disk_hits"] == 1
    assert warm["cpp_compiles"] == 0   # the library of the dynamic graph's kernels is on disk
    assert cold["error"] < 1e-5 and warm["error"] < 1e-5


def test_sizes_symbolic_and_numbers_as_tensors_together():
    """A changing batch and a changing float argument: the batch is a symbolic size of the
    kernels, the float a 0-d tensor input (lowering takes no symbolic scalars)."""
    def f(x, lr):
        return (x * lr).sum(-1) + x.shape[0]

    compiled = surge.compile(f)
    for k, b in enumerate([3, 5, 7, 4, 9, 6]):
        x, lr = torch.randn(b, 8), 0.1 * (k + 1)
        _close(compiled(x, lr), f(x, lr))
    assert _graphs_and_recompiles() == (2, 1)
    assert counters["static_fallbacks"] == 0 and counters["fallbacks"] == 0
