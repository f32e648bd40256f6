"""Guards: whatever a graph relied on is checked before it runs. Each test changes
one thing between calls and checks that the result stays right, that a recompile
happens where one must, and that nothing recompiles when nothing relevant changed."""
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

import surge
from corpus_harness import Args, CounterDelta, RecordingBackend, compare_call, randn

SCALE = 2.0
USE_RELU = True
BIAS = torch.zeros(4)
ACT = torch.relu
DEPTH = 2
MODE = "sum"
SETTINGS = {"shift": 1.0, "square": False}
KERNEL_SIZES = [1, 2]


class GlobalConfig:
    temperature = 1.0


CONFIG = GlobalConfig()


def vec(i):
    return (randn(4),)


def mat(i):
    return (randn(3, 4),)


class Run:
    """One compiled program and its counters, called next to eager step by step."""

    def __init__(self, fn):
        self.fn = fn
        self.backend = RecordingBackend()
        self.compiled = surge.compile(fn, backend=self.backend)
        self.delta = CounterDelta()

    def call(self, *args, **kwargs):
        return compare_call(self.compiled, self.fn, Args(*args, **kwargs))

    def expect(self, *, graphs, hits):
        assert len(self.backend.graphs) == graphs, f"graphs: {len(self.backend.graphs)} != {graphs}; {self.delta}"
        assert self.delta["recompiles"] == graphs - 1, f"recompiles; {self.delta}"
        assert self.delta["cache_hits"] == hits, f"cache hits; {self.delta}"
        assert self.delta["fallbacks"] == 0, f"fallbacks; {self.delta}"


def set_global(monkeypatch, name, value):
    monkeypatch.setitem(globals(), name, value)


# --- globals -----------------------------------------------------------------------------

def scaled(x):
    return x * SCALE


def test_global_float_changed_recompiles(monkeypatch):
    run = Run(scaled)
    run.call(randn(4))
    run.call(randn(4))
    set_global(monkeypatch, "SCALE", 3.0)
    run.call(randn(4))
    run.expect(graphs=2, hits=1)


def gated(x):
    return torch.relu(x) if USE_RELU else torch.sigmoid(x)


def test_global_flag_toggled_recompiles(monkeypatch):
    run = Run(gated)
    run.call(randn(4))
    set_global(monkeypatch, "USE_RELU", False)
    run.call(randn(4))
    run.call(randn(4))
    run.expect(graphs=2, hits=1)


def with_bias(x):
    return x + BIAS


def test_global_tensor_reassigned_gives_new_result(monkeypatch):
    run = Run(with_bias)
    run.call(randn(4))
    set_global(monkeypatch, "BIAS", randn(4))
    run.call(randn(4))
    assert len(run.backend.graphs) <= 2 and run.delta["fallbacks"] == 0


def test_global_tensor_mutated_in_place_is_not_stale(monkeypatch):
    set_global(monkeypatch, "BIAS", torch.zeros(4))
    run = Run(with_bias)
    run.call(randn(4))
    BIAS.add_(5.0)
    run.call(randn(4))
    run.expect(graphs=1, hits=1)


def test_global_tensor_reassigned_with_new_shape_recompiles(monkeypatch):
    run = Run(with_bias)
    run.call(randn(3, 4))
    set_global(monkeypatch, "BIAS", randn(3, 1))
    run.call(randn(3, 4))
    run.expect(graphs=2, hits=0)


def activated(x):
    return ACT(x) * 2


def test_global_function_swapped_recompiles(monkeypatch):
    run = Run(activated)
    run.call(randn(4))
    set_global(monkeypatch, "ACT", torch.tanh)
    run.call(randn(4))
    set_global(monkeypatch, "ACT", torch.relu)
    run.call(randn(4))
    run.expect(graphs=2, hits=1)


def deep(x):
    for _ in range(DEPTH):
        x = x.sin()
    return x


def test_global_int_loop_count_recompiles(monkeypatch):
    run = Run(deep)
    run.call(randn(4))
    set_global(monkeypatch, "DEPTH", 4)
    run.call(randn(4))
    run.expect(graphs=2, hits=0)


def reduce_by_mode(x):
    return x.sum() if MODE == "sum" else x.mean()


def test_global_string_changed_recompiles(monkeypatch):
    run = Run(reduce_by_mode)
    run.call(randn(4))
    set_global(monkeypatch, "MODE", "mean")
    run.call(randn(4))
    run.expect(graphs=2, hits=0)


def from_settings(x):
    y = x + SETTINGS["shift"]
    return y * y if SETTINGS["square"] else y


def test_global_dict_entry_changed_recompiles(monkeypatch):
    run = Run(from_settings)
    run.call(randn(4))
    monkeypatch.setitem(SETTINGS, "square", True)
    run.call(randn(4))
    monkeypatch.setitem(SETTINGS, "shift", -2.0)
    run.call(randn(4))
    run.expect(graphs=3, hits=0)


def multi_scale(x):
    return sum(x * k for k in KERNEL_SIZES)


def test_global_list_appended_recompiles(monkeypatch):
    monkeypatch.setitem(globals(), "KERNEL_SIZES", [1, 2])
    run = Run(multi_scale)
    run.call(randn(4))
    KERNEL_SIZES.append(5)
    run.call(randn(4))
    run.expect(graphs=2, hits=0)


def tempered(x):
    return (x / CONFIG.temperature).softmax(-1)


def test_global_object_attribute_changed_recompiles(monkeypatch):
    run = Run(tempered)
    run.call(randn(4))
    monkeypatch.setattr(CONFIG, "temperature", 0.5)
    run.call(randn(4))
    run.call(randn(4))
    run.expect(graphs=2, hits=1)


def test_unchanged_globals_hit_the_cache():
    run = Run(from_settings)
    for _ in range(4):
        run.call(randn(4))
    run.expect(graphs=1, hits=3)


def _callee_reading_global(x):
    return x * SCALE + 1


def calls_callee_reading_global(x):
    return _callee_reading_global(x).relu()


def test_global_read_by_inlined_callee_recompiles(monkeypatch):
    run = Run(calls_callee_reading_global)
    run.call(randn(4))
    set_global(monkeypatch, "SCALE", -1.0)
    run.call(randn(4))
    run.expect(graphs=2, hits=0)


# --- closures -----------------------------------------------------------------------------

def make_scaler(scale):
    def apply(x):
        return x * scale

    def set_scale(value):
        nonlocal scale
        scale = value

    return apply, set_scale


def test_closure_float_changed_recompiles():
    apply, set_scale = make_scaler(2.0)
    run = Run(apply)
    run.call(randn(4))
    set_scale(5.0)
    run.call(randn(4))
    run.call(randn(4))
    run.expect(graphs=2, hits=1)


def test_closure_tensor_reassigned_gives_new_result():
    apply, set_scale = make_scaler(randn(4))
    run = Run(apply)
    run.call(randn(4))
    set_scale(randn(4))
    run.call(randn(4))
    assert len(run.backend.graphs) <= 2 and run.delta["fallbacks"] == 0


def test_closure_function_swapped_recompiles():
    act = torch.relu

    def block(x):
        return act(x) + 1

    run = Run(block)
    run.call(randn(4))
    act = torch.sigmoid  # noqa: F841 (read through the closure cell)
    run.call(randn(4))
    run.expect(graphs=2, hits=0)


def test_closure_list_length_changed_recompiles():
    weights = [1.0, 2.0]

    def weighted(x):
        return sum(x * w for w in weights)

    run = Run(weighted)
    run.call(randn(4))
    weights.append(3.0)
    run.call(randn(4))
    weights[0] = 10.0
    run.call(randn(4))
    run.expect(graphs=3, hits=0)


def test_two_closures_of_one_code_object_do_not_share_results():
    apply_two, _ = make_scaler(2.0)
    apply_three, _ = make_scaler(3.0)
    first = Run(apply_two)
    second = Run(apply_three)
    first.call(randn(4))
    second.call(randn(4))
    first.call(randn(4))


def test_closure_object_attribute_changed_recompiles():
    cfg = GlobalConfig()

    def scaled_softmax(x):
        return (x * cfg.temperature).softmax(-1)

    run = Run(scaled_softmax)
    run.call(randn(4))
    cfg.temperature = 3.0
    run.call(randn(4))
    run.expect(graphs=2, hits=0)


# --- module attributes -------------------------------------------------------------------

class ScaledBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.scale = 1.0
        self.use_residual = True
        self.repeats = 1

    def forward(self, x):
        h = x
        for _ in range(self.repeats):
            h = self.act(self.fc(h)) * self.scale
        return x + h if self.use_residual else h


class ModuleRun(Run):
    def __init__(self, module):
        self.fn = module
        self.backend = RecordingBackend()
        self.compiled = surge.compile(module, backend=self.backend)
        self.delta = CounterDelta()


def test_module_float_attribute_changed_recompiles():
    module = ScaledBlock()
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module.scale = 0.5
    run.call(randn(2, 4))
    run.call(randn(2, 4))
    run.expect(graphs=2, hits=1)


def test_module_bool_flag_changed_recompiles():
    module = ScaledBlock()
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module.use_residual = False
    run.call(randn(2, 4))
    run.expect(graphs=2, hits=0)


def test_module_int_attribute_changed_recompiles():
    module = ScaledBlock()
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module.repeats = 3
    run.call(randn(2, 4))
    run.expect(graphs=2, hits=0)


def test_submodule_swapped_for_other_type_recompiles():
    module = ScaledBlock()
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module.act = nn.Tanh()
    run.call(randn(2, 4))
    run.expect(graphs=2, hits=0)


def test_submodule_swapped_for_same_type_gives_new_result():
    module = ScaledBlock()
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module.fc = nn.Linear(4, 4)
    run.call(randn(2, 4))
    assert len(run.backend.graphs) <= 2 and run.delta["fallbacks"] == 0


def test_parameter_reassigned_gives_new_result():
    module = ScaledBlock()
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module.fc.weight = nn.Parameter(randn(4, 4))
    run.call(randn(2, 4))
    assert len(run.backend.graphs) <= 2 and run.delta["fallbacks"] == 0


def test_parameter_updated_in_place_does_not_recompile():
    module = ScaledBlock()
    run = ModuleRun(module)
    run.call(randn(2, 4))
    with torch.no_grad():
        module.fc.weight.copy_(randn(4, 4))
        module.fc.bias.zero_()
    run.call(randn(2, 4))
    run.expect(graphs=1, hits=1)


def test_parameter_requires_grad_frozen_recompiles():
    module = ScaledBlock()
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module.fc.requires_grad_(False)
    out = run.call(randn(2, 4))
    assert not out.requires_grad
    run.expect(graphs=2, hits=0)


class TrainingDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) * (0.5 if self.training else 2.0)


def test_module_training_mode_recompiles_and_hits():
    module = TrainingDependent()
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module.eval()
    run.call(randn(2, 4))
    module.train()
    run.call(randn(2, 4))
    module.eval()
    run.call(randn(2, 4))
    run.expect(graphs=2, hits=2)


def test_nested_submodule_training_flag_recompiles():
    module = nn.Sequential(nn.Linear(4, 4), TrainingDependent())
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module[1].eval()  # only the inner module changes mode
    run.call(randn(2, 4))
    run.expect(graphs=2, hits=0)


class OptionalNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        if hasattr(self, "norm"):
            h = self.norm(h)
        return h


def test_module_attribute_added_recompiles():
    module = OptionalNorm()
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module.norm = nn.LayerNorm(4)
    run.call(randn(2, 4))
    run.expect(graphs=2, hits=0)


# --- arguments ---------------------------------------------------------------------------

def mlp(x, w):
    return F.gelu(x @ w).sum(-1)


def test_shape_change_recompiles_and_old_shape_hits():
    run = Run(mlp)
    run.call(randn(3, 4), randn(4, 5))
    run.call(randn(6, 4), randn(4, 5))
    run.call(randn(3, 4), randn(4, 5))
    run.expect(graphs=2, hits=1)


def test_rank_change_recompiles():
    run = Run(mlp)
    run.call(randn(3, 4), randn(4, 5))
    run.call(randn(2, 3, 4), randn(4, 5))
    run.expect(graphs=2, hits=0)


def test_dtype_change_recompiles():
    run = Run(mlp)
    run.call(randn(3, 4), randn(4, 5))
    out = run.call(randn(3, 4, dtype=torch.float64), randn(4, 5, dtype=torch.float64))
    assert out.dtype == torch.float64
    run.expect(graphs=2, hits=0)


def test_stride_change_contiguous_vs_transposed_recompiles():
    def flat_view(x):
        return x.view(-1) * 2 if x.is_contiguous() else x.reshape(-1) * 3

    run = Run(flat_view)
    run.call(randn(3, 4))
    run.call(randn(4, 3).t())
    run.call(randn(3, 4))
    run.expect(graphs=2, hits=1)


def test_transposed_input_to_matmul_is_correct():
    run = Run(mlp)
    run.call(randn(3, 4), randn(4, 5))
    run.call(randn(4, 3).t(), randn(5, 4).t())
    assert run.delta["fallbacks"] == 0 and len(run.backend.graphs) == 2


def test_requires_grad_change_recompiles():
    run = Run(mlp)
    run.call(randn(3, 4), randn(4, 5))
    out = run.call(randn(3, 4), randn(4, 5, requires_grad=True))
    assert out.requires_grad
    run.expect(graphs=2, hits=0)


def test_grad_mode_around_the_call_recompiles():
    run = Run(mlp)
    run.call(randn(3, 4), randn(4, 5, requires_grad=True))
    with torch.no_grad():
        out = run.call(randn(3, 4), randn(4, 5, requires_grad=True))
    assert not out.requires_grad
    run.call(randn(3, 4), randn(4, 5, requires_grad=True))
    run.expect(graphs=2, hits=1)


def test_default_dtype_change_recompiles():
    def with_new_tensor(x):
        return x.double() + torch.ones(4), torch.zeros(2).dtype

    run = Run(with_new_tensor)
    run.call(randn(4))
    torch.set_default_dtype(torch.float64)  # the conftest fixture restores it
    run.call(randn(4))
    run.expect(graphs=2, hits=0)


def test_tensor_subclass_change_recompiles():
    def double(x):
        return x * 2

    run = Run(double)
    run.call(randn(4))
    run.call(nn.Parameter(randn(4), requires_grad=False))
    run.call(randn(4))
    run.expect(graphs=2, hits=1)


def test_list_length_argument_recompiles():
    def total(xs):
        return torch.stack(xs).sum(0)

    run = Run(total)
    run.call([randn(3), randn(3)])
    run.call([randn(3), randn(3)])
    run.call([randn(3), randn(3), randn(3)])
    run.expect(graphs=2, hits=1)


def test_dict_keys_argument_recompiles():
    def weighted(feats):
        return sum(t * (i + 1) for i, t in enumerate(feats.values())), list(feats)

    run = Run(weighted)
    run.call({"a": randn(3), "b": randn(3)})
    run.call({"b": randn(3), "a": randn(3)})
    run.call({"a": randn(3), "c": randn(3)})
    run.expect(graphs=3, hits=0)


def test_none_vs_tensor_argument_recompiles():
    def maybe_bias(x, bias=None):
        return x * 2 if bias is None else x * 2 + bias

    run = Run(maybe_bias)
    run.call(randn(4), None)
    run.call(randn(4), randn(4))
    run.call(randn(4), None)
    run.expect(graphs=2, hits=1)


def test_explicit_none_and_omitted_default_share_an_entry():
    def maybe_bias(x, bias=None):
        return x * 2 if bias is None else x * 2 + bias

    run = Run(maybe_bias)
    run.call(randn(4))
    run.call(randn(4), None)
    run.call(randn(4), bias=None)
    run.expect(graphs=1, hits=2)


def test_int_argument_changed_recompiles():
    def power(x, n):
        return x ** n

    run = Run(power)
    run.call(randn(4), 2)
    run.call(randn(4), 3)
    run.call(randn(4), 2)
    run.expect(graphs=2, hits=1)


def test_bool_argument_changed_recompiles():
    def maybe_norm(x, normalize):
        return F.normalize(x, dim=-1) if normalize else x * 1

    run = Run(maybe_norm)
    run.call(randn(3, 4), True)
    run.call(randn(3, 4), False)
    run.expect(graphs=2, hits=0)


def test_string_argument_changed_recompiles():
    def activation(x, name):
        return getattr(torch, name)(x)

    run = Run(activation)
    run.call(randn(4), "tanh")
    run.call(randn(4), "sigmoid")
    run.call(randn(4), "tanh")
    run.expect(graphs=2, hits=1)


def test_float_argument_unchanged_hits():
    def shift(x, eps):
        return x + eps

    run = Run(shift)
    for _ in range(3):
        run.call(randn(4), 1e-3)
    run.expect(graphs=1, hits=2)


@dataclasses.dataclass
class Opts:
    scale: float = 1.0


@dataclasses.dataclass
class OtherOpts:
    scale: float = 1.0


def test_argument_type_changed_recompiles():
    def scaled_by(x, opts):
        return x * opts.scale + (1 if isinstance(opts, Opts) else -1)

    run = Run(scaled_by)
    run.call(randn(4), Opts())
    run.call(randn(4), OtherOpts())
    run.call(randn(4), Opts(scale=2.0))
    run.expect(graphs=3, hits=0)


def test_tuple_of_ints_argument_changed_recompiles():
    def reshape_to(x, shape):
        return x.reshape(shape) + 1

    run = Run(reshape_to)
    run.call(randn(12), (3, 4))
    run.call(randn(12), (4, 3))
    run.call(randn(12), (3, 4))
    run.expect(graphs=2, hits=1)


def test_dtype_argument_changed_recompiles():
    def cast(x, dtype):
        return x.to(dtype) * 2

    run = Run(cast)
    run.call(randn(4), torch.float64)
    run.call(randn(4), torch.float16)
    run.expect(graphs=2, hits=0)


def test_object_identity_in_closure_guarded():
    def make(module):
        def apply(x):
            return module(x)

        return apply

    first, second = nn.Linear(4, 2), nn.Linear(4, 2)
    run_a = Run(make(first))
    run_b = Run(make(second))
    for _ in range(2):
        run_a.call(randn(3, 4))
        run_b.call(randn(3, 4))


def test_recompile_reason_is_logged(monkeypatch, capsys):
    monkeypatch.setenv("SURGE_LOGS", "recompiles")
    run = Run(scaled)
    run.call(randn(4))
    set_global(monkeypatch, "SCALE", 7.0)
    run.call(randn(4))
    err = capsys.readouterr().err
    assert "recompiles" in err and "SCALE" in err, err


def test_global_tensor_requires_grad_toggled_recompiles(monkeypatch):
    set_global(monkeypatch, "BIAS", torch.zeros(4))
    run = Run(with_bias)
    run.call(randn(4))
    BIAS.requires_grad_(True)
    out = run.call(randn(4))
    assert out.requires_grad
    run.expect(graphs=2, hits=0)


def test_global_tensor_dtype_changed_recompiles(monkeypatch):
    run = Run(with_bias)
    run.call(randn(4))
    set_global(monkeypatch, "BIAS", torch.ones(4, dtype=torch.float64))
    out = run.call(randn(4))
    assert out.dtype == torch.float64
    run.expect(graphs=2, hits=0)


def test_parameter_reassigned_with_new_shape_recompiles():
    module = ScaledBlock()
    module.use_residual = False
    run = ModuleRun(module)
    run.call(randn(2, 4))
    module.fc = nn.Linear(4, 6)
    module.act = nn.Identity()
    run.call(randn(2, 4))
    assert run.delta["recompiles"] >= 1 and run.delta["fallbacks"] == 0


def test_alternating_shapes_hit_their_own_entries():
    run = Run(mlp)
    for n in (3, 5, 3, 5):
        run.call(randn(n, 4), randn(4, 5))
    run.expect(graphs=2, hits=2)


def test_module_attribute_written_by_forward_each_call():
    class StepScaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.step = 0

        def forward(self, x):
            self.step += 1
            return x * self.step

    module = StepScaled()
    compiled = surge.compile(module, backend=RecordingBackend())
    for expected in range(1, 4):
        x = randn(3)
        torch.testing.assert_close(compiled(x), x * expected)
    assert module.step == 3


def test_inference_mode_around_the_call():
    run = Run(mlp)
    run.call(randn(3, 4), randn(4, 5))
    with torch.inference_mode():
        out = run.call(randn(3, 4), randn(4, 5))
    assert out.is_inference()
