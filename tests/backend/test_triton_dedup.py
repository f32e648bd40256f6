"""A kernel's compiled identity is its body: equal kernels are one file, one function, one binary."""
import hashlib
import os

import pytest
import torch
import torch.nn.functional as F

from surge.runtime import autotune

from .helpers import assert_matches_eager, compile_fn, randn


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path, monkeypatch):
    """Modules of this file's programs stay out of the session's cache (other tests
    compile some of the same programs and expect a fresh compile)."""
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path / "surge_cache"))


def three_layers(x, m1, m2, m3, w, b):
    """The same Linear+LayerNorm+GELU block three times (the matmuls keep them apart)."""
    for m in (m1, m2, m3):
        x = F.gelu(F.layer_norm(x @ m, (x.shape[-1],), w, b))
    return x


def _inputs():
    return [randn(5, 24)] + [randn(24, 24) for _ in range(3)] + [randn(24), randn(24)]


def test_repeated_layers_share_one_kernel_file_and_function():
    c = compile_fn(three_layers, *_inputs())
    names = c.kernel_names
    assert len(names) == 3, names                       # three call sites ...
    assert len(c.module.KERNEL_FILES) == 1              # ... of one kernel
    functions = {id(getattr(c.module, n)) for n in names}
    assert len(functions) == 1
    (key, text), = c.module.KERNEL_FILES.items()
    assert key == hashlib.sha256(text.encode()).hexdigest()[:24]
    # named after the ops it fuses, without the call site's index
    function = c.module.KERNELS[names[0]]["function"]
    assert function.startswith("triton_fused_") and "gelu" in function and not function[-1].isdigit()
    assert f"def {function}(" in text
    assert_matches_eager(three_layers, c, *_inputs(), atol=1e-5, rtol=1e-5)


def test_equal_kernels_of_two_graphs_are_one_function_and_one_file():
    first = compile_fn(lambda x, y: F.gelu(x + y) * 2, randn(6, 8), randn(6, 8))
    second = compile_fn(lambda x, y, z: (F.gelu(x + y) * 2, z @ z), randn(6, 8), randn(6, 8), randn(4, 4))
    assert first.path != second.path, "two graphs, two modules"
    a, b = first.kernel_names[0], second.kernel_names[0]
    assert first.module.KERNELS[a]["file"] == second.module.KERNELS[b]["file"]
    assert getattr(first.module, a) is getattr(second.module, b)
    folder = os.path.join(os.path.dirname(os.path.dirname(first.path)), "kernels")
    key = first.module.KERNELS[a]["file"]
    with open(os.path.join(folder, key + ".py")) as f:
        assert f.read() == first.module.KERNEL_FILES[key]


def test_distinct_bodies_stay_distinct():
    c = compile_fn(lambda x, y: (F.gelu(x + y), torch.sigmoid(x * y).sum(-1)), randn(6, 8), randn(6, 8))
    files = {c.module.KERNELS[n]["file"] for n in c.kernel_names}
    assert len(files) == len(c.kernel_names) == len(c.module.KERNEL_FILES)


def test_tuned_choice_is_keyed_by_body_sizes_and_device(tmp_path):
    c = compile_fn(three_layers, *_inputs())
    metas = [c.module.KERNELS[n] for n in c.kernel_names]
    keys = {autotune.tuning_key(c.source, m, "H200") for m in metas}
    assert len(keys) == 1, "the call sites of one kernel share a tuned choice"
    other_size = dict(metas[0], xnumel=metas[0]["xnumel"] * 2)
    assert autotune.tuning_key(c.source, other_size, "H200") not in keys
    assert autotune.tuning_key(c.source, metas[0], "A100") not in keys
    # a stored choice is what the first launch (and the ahead-of-launch compile) uses
    default = autotune.launch_config(metas[0], str(tmp_path), "H200")
    assert default == autotune.candidate_configs(metas[0], interpret=False)[0]
    chosen = autotune.candidate_configs(metas[0], interpret=False)[-1]
    autotune.store_choice(str(tmp_path), keys.pop(), chosen, [1.0])
    assert all(autotune.launch_config(m, str(tmp_path), "H200") == chosen for m in metas)


def three_looped_reductions(x, m1, m2, m3):
    """Row sums and variances looped in tiles (rows longer than the persistent limit)
    after each of three matmuls: each layer's reduction has buffers of its own."""
    outs = []
    for m in (m1, m2, m3):
        x = x @ m
        outs.append(x.sum(-1) + x.var(-1))
    return outs


def test_repeated_looped_reductions_share_one_kernel():
    inputs = [randn(3, 40)] + [randn(40, 40) for _ in range(3)]
    c = compile_fn(three_looped_reductions, *inputs, persistent_reduction_limit=16)
    assert len(c.kernel_names) == 3
    text, = c.module.KERNEL_FILES.values()   # accumulators are not named after the layer's buffers
    assert "for " in text, "the reductions loop over tiles"
    assert_matches_eager(three_looped_reductions, c, *inputs, atol=1e-4, rtol=1e-4)
