"""Dynamic shapes: symbolic sizes and numbers, automatic dynamic, marks, guards on sizes.

Each program runs over varying sizes against eager on fresh inputs, and counts graphs
and recompiles: one static graph, then one dynamic graph for every later size (as
torch.compile does), with the eager and aot_eager backends; the kernel backends take
the same graphs (tests/backend/test_dynamic_kernels.py).
"""
import pytest
import torch
import torch.nn.functional as F

import surge
from surge.frontend.shape_env import ShapeEnv
from surge.frontend.symbolic import Expr, Rel, Symbol

BACKENDS = ["eager", "aot_eager"]


def _compile(fn, backend, **kw):
    return surge.compile(fn, backend=backend, **kw)


def _close(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    else:
        assert a == b and type(a) is type(b), (a, b)


def _graphs_and_recompiles():
    return surge.counters["graphs"], surge.counters["recompiles"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_mlp_over_batch_sizes_compiles_twice(backend):
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    compiled = _compile(mlp, backend)
    for b in range(2, 12):
        x = torch.randn(b, 8)
        _close(compiled(x), mlp(x))
    assert _graphs_and_recompiles() == (2, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_factories_shaped_like_a_symbolic_tensor_keep_it_symbolic(backend):
    # full_like / zeros_like / fill_ decompose to full over the symbolic shape: T5's
    # relative-position buckets (torch.full_like over a (q, k) tensor) do this every layer.
    def buckets(x):
        capped = torch.minimum(x, torch.full_like(x, 7))
        return capped + torch.zeros_like(x) + x.clone().fill_(2)

    compiled = _compile(buckets, backend)
    for n in range(3, 9):
        x = torch.randint(0, 12, (n, n + 1))
        _close(compiled(x), buckets(x))
    assert _graphs_and_recompiles() == (2, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_over_sequence_lengths(backend):
    qkv = torch.nn.Linear(16, 48)

    def block(x):
        b, t, c = x.shape
        q, k, v = qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(b, t, c)

    compiled = _compile(block, backend)
    with torch.no_grad():
        for t in range(3, 13):
            x = torch.randn(2, t, 16)
            _close(compiled(x), block(x))
    assert _graphs_and_recompiles() == (2, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_loop_with_a_growing_cache(backend):
    def step(cache, x):
        cache = torch.cat([cache, x], dim=1)
        return cache, cache.softmax(-1).sum(1)

    compiled = _compile(step, backend)
    cache, ref = torch.randn(2, 2, 4), None
    ref_cache = cache.clone()
    for _ in range(10):
        x = torch.randn(2, 1, 4)
        cache, out = compiled(cache, x)
        ref_cache, ref = step(ref_cache, x)
        _close(out, ref)
        _close(cache, ref_cache)
    assert _graphs_and_recompiles() == (2, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_int_and_float_arguments_become_symbolic(backend):
    def f(x, n, lr):
        return (x * lr).sum() + n, x.new_zeros(n).shape[0] * 2

    compiled = _compile(f, backend)
    for i in range(10):
        x = torch.randn(4)
        _close(compiled(x, i + 2, 0.1 * (i + 1)), f(x, i + 2, 0.1 * (i + 1)))
    assert _graphs_and_recompiles() == (2, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_dims_varying_together_and_views_of_their_product(backend):
    def f(x):
        b, t, c = x.shape
        flat = x.reshape(b * t, c)
        return flat.view(-1).sum(), flat.view(b, t * c) + 1, x.flatten(0, 1).shape

    compiled = _compile(f, backend)
    for n in range(2, 12):
        x = torch.randn(n, n + 1, 3)
        _close(compiled(x), f(x))
    assert _graphs_and_recompiles() == (2, 1)


def test_sizes_zero_and_one_stay_specialized():
    def f(x):
        return x.sum(0) + x.shape[0]

    compiled = _compile(f, "eager")
    for b in (2, 3, 4, 1, 0, 5, 1):
        x = torch.randn(b, 3)
        _close(compiled(x), f(x))
    # 2 (static), 3 (dynamic, serves 4 and 5), 1 and 0 each their own
    assert surge.counters["graphs"] == 4


def test_a_broadcast_relation_that_holds_then_fails():
    def f(x, y):
        return x + y

    compiled = _compile(f, "eager")
    for n in range(2, 7):
        x, y = torch.randn(n, 3), torch.randn(n, 3)
        _close(compiled(x, y), f(x, y))
    assert _graphs_and_recompiles() == (2, 1)
    # The dynamic entry assumed the two sizes equal: a call where they differ (and
    # broadcast, one being 1) must not reuse it.
    x, y = torch.randn(5, 3), torch.randn(1, 3)
    _close(compiled(x, y), f(x, y))
    assert surge.counters["recompiles"] == 2
    with pytest.raises(RuntimeError):
        compiled(torch.randn(5, 3), torch.randn(4, 3))


@pytest.mark.parametrize("marker", ["surge", "torch"])
def test_mark_dynamic_with_a_range(marker, capsys, monkeypatch):
    monkeypatch.setenv("SURGE_LOGS", "dynamic,recompiles")

    def f(x):
        return x * 2

    compiled = _compile(f, "eager")
    for b in (4, 5, 6, 8):
        x = torch.randn(b, 3)
        if marker == "surge":
            surge.mark_dynamic(x, 0, min=2, max=8)
        else:
            torch._dynamo.mark_dynamic(x, 0, min=2, max=8)
        _close(compiled(x), f(x))
    assert _graphs_and_recompiles() == (1, 0)
    x = torch.randn(20, 3)
    surge.mark_dynamic(x, 0, min=2, max=8)
    _close(compiled(x), f(x))
    assert surge.counters["recompiles"] == 1
    err = capsys.readouterr().err
    assert "outside its declared range" in err
    assert "L['x'].size()[0] <= 8 failed: actual 20" in err


def test_mark_static_keeps_a_dim_static():
    def f(x):
        return x * 2

    compiled = _compile(f, "eager", dynamic=True)
    for b in (4, 5):
        x = torch.randn(b, 3)
        surge.mark_static(x, 0)
        _close(compiled(x), f(x))
    assert _graphs_and_recompiles() == (2, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_true_is_symbolic_from_the_first_compile(backend):
    def f(x):
        return torch.tanh(x).view(-1)

    compiled = _compile(f, backend, dynamic=True)
    for b in range(2, 12):
        x = torch.randn(b, b + 2)
        _close(compiled(x), f(x))
    assert _graphs_and_recompiles() == (1, 0)


def test_dynamic_false_never_symbolic():
    compiled = _compile(lambda x: x + 1, "eager", dynamic=False)
    for b in range(2, 6):
        compiled(torch.randn(b))
    assert _graphs_and_recompiles() == (4, 3)


def test_training_with_a_varying_batch_gradients_equal():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 1))
    reference = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 1))
    reference.load_state_dict(model.state_dict())
    compiled = _compile(model, "aot_eager")
    for b in range(2, 12):
        x = torch.randn(b, 6)
        compiled(x).pow(2).mean().backward()
        reference(x).pow(2).mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert _graphs_and_recompiles() == (2, 1)


def test_kernel_backend_compiles_one_dynamic_graph(capsys, monkeypatch):
    """The cpp backend takes symbolic sizes: a static graph, then one for every size."""
    monkeypatch.setenv("SURGE_LOGS", "dynamic")
    compiled = _compile(lambda x: x * 2 + 1, "cpp")
    for b in (2, 3, 4, 5):
        x = torch.randn(b)
        _close(compiled(x), x * 2 + 1)
    assert _graphs_and_recompiles() == (2, 1)
    assert surge.counters["fallbacks"] == 0
    err = capsys.readouterr().err
    assert "becomes symbolic" in err and "compiled per concrete sizes" not in err


def test_a_size_specialized_for_its_value_names_the_users_line(capsys, monkeypatch):
    """A loop over ``range(n)`` needs ``n`` as a number: the size is specialized, and the
    dynamic log says at which line of the user's code."""
    monkeypatch.setenv("SURGE_LOGS", "dynamic")

    def f(x):
        out = x
        for i in range(x.shape[0]):
            out = out + i
        return out

    line = f.__code__.co_firstlineno + 2
    compiled = _compile(f, "eager")
    for b in (3, 4):
        x = torch.randn(b)
        _close(compiled(x), f(x))
    err = capsys.readouterr().err
    assert f"specialized to 4: its value was needed as a Python number at {__file__}:{line}" in err


def test_graph_inputs_are_symint_placeholders_as_dynamo_hands_them():
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, list(example_inputs)))
        return gm.forward

    compiled = surge.compile(lambda x: x.sum(0) * x.shape[0], backend=backend)
    compiled(torch.randn(2, 3))
    compiled(torch.randn(5, 3))
    gm, inputs = seen[-1]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert isinstance(placeholders[0].meta["val"], torch.SymInt) and inputs[0] == 5
    assert isinstance(placeholders[1].meta["val"].shape[0], torch.SymInt)


# ---- the shape environment itself -------------------------------------------------

class _Named:
    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name


def test_a_product_of_one_symbol_is_decided_by_shifting_to_its_lower_bound():
    env = ShapeEnv()
    s0 = env.size_symbol(_Named("a"), 3, "t")
    assert bool(s0 != s0 * s0) is True and bool(s0 * s0 >= 2 * s0) is True
    assert bool(3 * s0 > 0) is True and bool(s0 * s0 * 2 >= 8) is True
    assert env.facts == []
    assert bool(s0 * s0 > 3 * s0) is False and len(env.facts) == 1   # not decided: a guard


def test_a_rounded_size_is_decided_by_its_range():
    """``math.ceil(s / 32) * 32`` (a meta kernel padding a size) is at least 32 for s >= 2:
    comparisons with it need no guard."""
    import math

    env = ShapeEnv()
    s0 = env.size_symbol(_Named("a"), 5, "t")
    padded = math.ceil(s0 / 32) * 32
    assert bool(padded != 0) is True and bool(padded >= 32) is True and bool(padded >= 1) is True
    assert env.facts == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_size_rounded_up_keeps_one_dynamic_graph(backend):
    """A guard on a rounded size (``math.ceil`` in its condition) holds on later calls."""
    import math

    def f(x):   # the padding's size is not known to be nonzero: guarded
        return torch.zeros(math.ceil(x.shape[0] / 32) * 32 - x.shape[0]) + x.sum()

    compiled = _compile(f, backend)
    for n in (5, 7, 9, 40, 70):
        x = torch.randn(n)
        _close(compiled(x), f(x))
    assert _graphs_and_recompiles() == (2, 1)


def test_normal_form_decides_equal_products_without_guards():
    env = ShapeEnv()
    s0, s1 = env.size_symbol(_Named("a"), 3, "t"), env.size_symbol(_Named("b"), 4, "t")
    assert bool(s0 * s1 * 768 == s0 * s1 * 12 * 64) is True
    assert bool((s0 * 4) // 4 == s0) is True
    assert env.facts == []


def test_facts_replace_and_narrow():
    env = ShapeEnv()
    s0, s1 = env.size_symbol(_Named("a"), 3, "t"), env.size_symbol(_Named("b"), 3, "t")
    assert bool(s0 == s1) is True
    assert bool(s0 * 2 == s1 + s0) is True and len(env.facts) == 1   # decided by s1 -> s0
    assert bool(s0 >= 3) is True
    assert env.range(Symbol("s0")) == (3, float("inf"))
    checks = [c for c, _ in env.guard_conditions(lambda s: s.name)]
    assert "s0 == s1" in checks and "s0 >= 3" in checks and len(env.facts) == 1


def test_rel_render_and_evaluate():
    rel = Rel.compare(">=", Expr.atom(Symbol("s0")), Expr.const(2))
    assert rel.evaluate(lambda s: 2) and not rel.evaluate(lambda s: 1)
    assert rel.render(lambda s: "x") == "2 <= x"


def test_explain_says_which_dimension_is_symbolic_and_why():
    def f(x):
        return x * 2

    x = torch.randn(4, 2)
    surge.mark_dynamic(x, 0)
    text = str(surge.explain(f, backend="eager")(x))
    assert "L['x'].size()[0] >= 2 (s0, symbolic: mark_dynamic)" in text


def test_torch_compile_with_surge_backend_survives_symbolic_sizes():
    """Dynamo hands symbolic sizes on the second shape: surge's kernel backend compiles
    one graph for them (its symbols rebuilt on surge's shape environment)."""
    def f(x):
        return torch.relu(x) * 2 + x.shape[0]

    for dynamic in (None, True):
        compiled = torch.compile(f, backend=surge.backend, dynamic=dynamic)
        for n in (3, 4, 5):
            x = torch.randn(n, 4)
            _close(compiled(x), f(x))
        torch._dynamo.reset()


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_that_are_views_of_inputs_with_symbolic_sizes(backend):
    def f(x):
        b, c = x.shape
        return x.view(b * c), x[1:], x.t(), (x * 2).view(b * c // 2, 2)

    compiled = _compile(f, backend)
    for b in (2, 4, 6, 8, 10, 12):
        x = torch.randn(b, 3)
        out = compiled(x)
        _close(out, f(x))
        assert out[0]._base is x and out[1]._base is x
    assert _graphs_and_recompiles() == (2, 1)
    assert surge.counters["fallbacks"] == 0


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "t5"])
def test_transformers_models_over_sequence_lengths_compile_twice(name):
    pytest.importorskip("transformers")
    from tests.frontend.test_hf_models import BATCH, MODELS, VOCAB

    torch.manual_seed(0)
    make, output = MODELS[name]
    model = make().eval()
    compiled = _compile(model, "aot_eager")
    with torch.no_grad():
        for seq in range(3, 9):
            kwargs = {"input_ids": torch.randint(0, VOCAB, (BATCH, seq)), "use_cache": False}
            if name == "bert":
                kwargs["attention_mask"] = torch.ones(BATCH, seq, dtype=torch.long)
            if name == "t5":
                kwargs["decoder_input_ids"] = torch.randint(0, VOCAB, (BATCH, seq))
            torch.testing.assert_close(getattr(compiled(**kwargs), output), getattr(model(**kwargs), output),
                                       rtol=1e-4, atol=1e-4)
    assert _graphs_and_recompiles() == (2, 1)
    assert surge.counters["fallbacks"] == 0
