"""Guards where a careless check gives a wrong cache hit: values that compare equal
but differ in type or sign, NaN, aliased inputs, other devices, two instances of
one module class, containers nested in globals, and structural edits to modules."""
import math

import pytest
import torch
import torch.nn as nn

import surge
from corpus_harness import Args, CounterDelta, RecordingBackend, assert_same, compare_call, randn

LAYER_CONFIG = {"widths": [1.0, 2.0]}


def call_both(compiled, fn, *args):
    return compare_call(compiled, fn, Args(*args))


def scaled_and_echoed(x, n):
    kind = "bool" if isinstance(n, bool) else type(n).__name__
    return x * n, n, kind


@pytest.mark.parametrize(
    "first,second",
    [(1, True), (True, 1), (2, 2.0), (0, False), (1.0, 1)],
    ids=["int-then-bool", "bool-then-int", "int-then-float", "zero-then-false", "float-then-int"],
)
def test_equal_python_values_of_other_types_do_not_share_an_entry(first, second):
    backend = RecordingBackend()
    compiled = surge.compile(scaled_and_echoed, backend=backend)
    call_both(compiled, scaled_and_echoed, randn(3), first)
    call_both(compiled, scaled_and_echoed, randn(3), second)
    assert len(backend.graphs) == 2


def test_negative_zero_is_not_positive_zero():
    def signed(x, s):
        return x * math.copysign(1.0, s)

    compiled = surge.compile(signed, backend=RecordingBackend())
    call_both(compiled, signed, randn(3), 0.0)
    call_both(compiled, signed, randn(3), -0.0)


def test_nan_argument_stays_correct():
    def shift(x, s):
        return x + (0.0 if math.isnan(s) else s)

    compiled = surge.compile(shift, backend=RecordingBackend())
    for s in (float("nan"), float("nan"), 1.0, float("nan")):
        call_both(compiled, shift, randn(3), s)
    assert surge.counters["fallbacks"] == 0


def test_aliased_inputs_after_distinct_inputs():
    def bump_then_read(a, b):
        a.add_(1.0)
        return b * 2

    compiled = surge.compile(bump_then_read, backend=RecordingBackend())
    call_both(compiled, bump_then_read, randn(3), randn(3))
    x = randn(3)
    expected = (x + 1.0) * 2
    out = compiled(x, x)
    torch.testing.assert_close(out, expected)


def test_view_of_another_input_after_distinct_inputs():
    def write_then_sum(buf, window):
        buf.mul_(2.0)
        return window.sum()

    compiled = surge.compile(write_then_sum, backend=RecordingBackend())
    call_both(compiled, write_then_sum, randn(4), randn(2))
    base = randn(4)
    expected = (base[1:3] * 2.0).sum()
    torch.testing.assert_close(compiled(base, base[1:3]), expected)


def test_other_device_recompiles():
    def affine(x):
        return x * 3 + 1

    backend = RecordingBackend()
    compiled = surge.compile(affine, backend=backend)
    call_both(compiled, affine, randn(3))
    out = compiled(torch.empty(3, device="meta"))
    assert out.device.type == "meta" and out.shape == (3,)
    assert len(backend.graphs) == 2


def test_size_zero_and_one_dimensions():
    def normalize_rows(x):
        return x / (x.sum(-1, keepdim=True) + 1)

    compiled = surge.compile(normalize_rows, backend=RecordingBackend())
    for rows in (1, 0, 3, 1):
        call_both(compiled, normalize_rows, randn(rows, 4))


class Affine(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = scale

    def forward(self, x):
        return self.fc(x) * self.scale


def test_two_instances_of_one_module_class_keep_their_own_weights():
    first, second = Affine(1.0), Affine(1.0)
    compiled_first = surge.compile(first, backend=RecordingBackend())
    compiled_second = surge.compile(second, backend=RecordingBackend())
    for _ in range(2):
        call_both(compiled_first, first, randn(2, 4))
        call_both(compiled_second, second, randn(2, 4))


def test_two_instances_with_different_python_attributes():
    first, second = Affine(1.0), Affine(-3.0)
    compiled_first = surge.compile(first, backend=RecordingBackend())
    compiled_second = surge.compile(second, backend=RecordingBackend())
    for _ in range(2):
        call_both(compiled_second, second, randn(2, 4))
        call_both(compiled_first, first, randn(2, 4))


def test_one_instance_inside_two_parents():
    shared = Affine(2.0)
    left = nn.Sequential(shared, nn.ReLU())
    right = nn.Sequential(nn.Tanh(), shared)
    compiled_left = surge.compile(left, backend=RecordingBackend())
    compiled_right = surge.compile(right, backend=RecordingBackend())
    call_both(compiled_left, left, randn(2, 4))
    call_both(compiled_right, right, randn(2, 4))
    shared.scale = 5.0
    call_both(compiled_left, left, randn(2, 4))
    call_both(compiled_right, right, randn(2, 4))


def widened(x):
    return sum(x * w for w in LAYER_CONFIG["widths"])


def test_list_nested_in_global_dict_mutated(monkeypatch):
    monkeypatch.setitem(globals(), "LAYER_CONFIG", {"widths": [1.0, 2.0]})
    backend = RecordingBackend()
    compiled = surge.compile(widened, backend=backend)
    call_both(compiled, widened, randn(3))
    LAYER_CONFIG["widths"].append(4.0)
    call_both(compiled, widened, randn(3))
    LAYER_CONFIG["widths"][0] = -1.0
    call_both(compiled, widened, randn(3))
    assert len(backend.graphs) == 3


class PropertyScaled(nn.Module):
    def __init__(self):
        super().__init__()
        self._base = 1.0

    @property
    def scale(self):
        return self._base * 2

    def forward(self, x):
        return x * self.scale


def test_property_over_mutable_state():
    module = PropertyScaled()
    compiled = surge.compile(module, backend=RecordingBackend())
    call_both(compiled, module, randn(3))
    module._base = 4.0
    call_both(compiled, module, randn(3))


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Affine(1.0), Affine(0.5)])
        self.heads = nn.ModuleDict({"main": nn.Linear(4, 2)})

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return {name: head(x) for name, head in self.heads.items()}


def test_module_list_appended_between_calls():
    module = Stack()
    backend = RecordingBackend()
    compiled = surge.compile(module, backend=backend)
    call_both(compiled, module, randn(2, 4))
    module.layers.append(Affine(2.0))
    call_both(compiled, module, randn(2, 4))
    assert len(backend.graphs) == 2


def test_module_dict_entry_added_and_replaced():
    module = Stack()
    compiled = surge.compile(module, backend=RecordingBackend())
    call_both(compiled, module, randn(2, 4))
    module.heads["aux"] = nn.Linear(4, 3)
    call_both(compiled, module, randn(2, 4))
    module.heads["main"] = nn.Sequential(nn.Linear(4, 2), nn.Sigmoid())
    call_both(compiled, module, randn(2, 4))


def test_deep_attribute_of_nested_submodule_changed():
    module = Stack()
    backend = RecordingBackend()
    compiled = surge.compile(module, backend=backend)
    call_both(compiled, module, randn(2, 4))
    module.layers[1].scale = 10.0
    call_both(compiled, module, randn(2, 4))
    call_both(compiled, module, randn(2, 4))
    assert len(backend.graphs) == 2


def test_element_of_list_argument_changes_dtype():
    def total(xs):
        return xs[0] + xs[1]

    backend = RecordingBackend()
    compiled = surge.compile(total, backend=backend)
    call_both(compiled, total, [randn(3), randn(3)])
    out = call_both(compiled, total, [randn(3), randn(3, dtype=torch.float64)])
    assert out.dtype == torch.float64 and len(backend.graphs) == 2


def test_dict_argument_value_changes_from_tensor_to_float():
    def shifted(x, extras):
        return x + extras["shift"]

    compiled = surge.compile(shifted, backend=RecordingBackend())
    call_both(compiled, shifted, randn(3), {"shift": randn(3)})
    call_both(compiled, shifted, randn(3), {"shift": 0.5})
    call_both(compiled, shifted, randn(3), {"shift": randn(3)})


def test_random_ops_match_eager_under_the_same_seed():
    def noisy(x):
        return x + torch.rand_like(x) * 0.1 + torch.randn(3)

    compiled = surge.compile(noisy, backend=RecordingBackend())
    for seed in (0, 1):
        x = randn(3)
        torch.manual_seed(seed)
        expected = noisy(x)
        torch.manual_seed(seed)
        assert_same(compiled(x), expected)


def test_recompile_log_names_the_module_attribute(monkeypatch, capsys):
    monkeypatch.setenv("SURGE_LOGS", "recompiles")
    module = Affine(1.0)
    compiled = surge.compile(module, backend=RecordingBackend())
    call_both(compiled, module, randn(2, 4))
    module.scale = 2.5
    call_both(compiled, module, randn(2, 4))
    err = capsys.readouterr().err
    assert "scale" in err, err


def test_cache_hit_counts_without_recompiles_over_many_calls():
    def block(x, w):
        return torch.relu(x @ w)

    compiled = surge.compile(block, backend=RecordingBackend())
    delta = CounterDelta()
    for _ in range(10):
        call_both(compiled, block, randn(2, 3), randn(3, 3))
    assert delta["cache_hits"] == 9 and delta["recompiles"] == 0 and delta["graphs"] == 1


def _log_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if "surge:recompiles" in line]


class ModeScaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = 1.0

    def forward(self, x):
        return self.fc(x) * (self.scale if self.training else -self.scale)


def _to_double(module):
    module.double()
    return (randn(3, 4, dtype=torch.float64),)


@pytest.mark.parametrize(
    "change,word",
    [
        (lambda module: (randn(5, 4),), "shape"),
        (_to_double, "float"),
        (lambda module: module.eval() and (randn(3, 4),), "training"),
        (lambda module: setattr(module, "scale", 9.0) or (randn(3, 4),), "scale"),
    ],
    ids=["shape", "dtype", "training", "attribute"],
)
def test_each_recompile_logs_one_line_naming_its_cause(monkeypatch, capsys, change, word):
    monkeypatch.setenv("SURGE_LOGS", "recompiles")
    module = ModeScaled()
    compiled = surge.compile(module, backend=RecordingBackend())
    call_both(compiled, module, randn(3, 4))
    _log_lines(capsys)
    call_both(compiled, module, *change(module))
    lines = _log_lines(capsys)
    assert len(lines) == 1, lines
    assert word in lines[0], lines[0]


def test_same_tensor_twice_then_distinct_tensors():
    def difference(a, b):
        return a - b, a * b

    backend = RecordingBackend()
    compiled = surge.compile(difference, backend=backend)
    x = randn(3)
    call_both(compiled, difference, x, x)
    call_both(compiled, difference, randn(3), randn(3))
    y = randn(3)
    call_both(compiled, difference, y, y)


def test_same_tensor_twice_in_a_list_then_distinct():
    def pairwise(xs):
        return [a - b for a, b in zip(xs, xs[1:])]

    compiled = surge.compile(pairwise, backend=RecordingBackend())
    x = randn(3)
    call_both(compiled, pairwise, [x, x, randn(3)])
    call_both(compiled, pairwise, [randn(3), randn(3), randn(3)])


SHARED_TABLE = torch.zeros(3)


def add_table(x):
    return x + SHARED_TABLE


def test_argument_that_is_also_the_global_then_is_not(monkeypatch):
    monkeypatch.setitem(globals(), "SHARED_TABLE", randn(3))
    compiled = surge.compile(add_table, backend=RecordingBackend())
    out = compiled(SHARED_TABLE)
    torch.testing.assert_close(out, SHARED_TABLE * 2)
    x = randn(3)
    torch.testing.assert_close(compiled(x), x + SHARED_TABLE)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 4, bias=False)
        self.dec = nn.Linear(4, 4, bias=False)
        self.dec.weight = self.enc.weight

    def forward(self, x):
        return self.dec(torch.tanh(self.enc(x)))


def test_tied_weights_untied_between_calls():
    module = Tied()
    compiled = surge.compile(module, backend=RecordingBackend())
    call_both(compiled, module, randn(2, 4))
    module.dec.weight = nn.Parameter(randn(4, 4))
    call_both(compiled, module, randn(2, 4))
    module.dec.weight = module.enc.weight
    call_both(compiled, module, randn(2, 4))
