"""Constructs whose bytecode differs between Python 3.11 and 3.12 or that library
code uses a lot: unary operators, super(Cls, self), user context managers,
attribute and subscript augmented assignment, next(iter(...)), torch.finfo,
unbound Tensor methods, dynamic getattr on torch modules, builtins on tensors."""
import contextlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import surge
from corpus_harness import RecordingBackend, check_fn, check_module, randn

LAST_OUTPUT = None


def mat(i):
    return (randn(3, 4),)


def unary_operators(x, n):
    return +x, -x, ~(x > 0), not n, -n, +n, ~n


class Recorder:
    """A user context manager written as a class."""

    def __init__(self):
        self.events = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exc):
        self.events.append("exit")
        return False


def class_context_manager(x):
    rec = Recorder()
    with rec as r:
        y = x * 2
        r.events.append("body")
    return y, rec.events


@contextlib.contextmanager
def scaled_section(log, scale):
    log.append(f"start {scale}")
    yield scale * 2
    log.append("stop")


def generator_context_manager(x):
    log = []
    with scaled_section(log, 1.5) as factor:
        y = x * factor
    return y, log


class Accumulator:
    def __init__(self):
        self.total = 0.0
        self.count = 0


def attribute_augmented_assignment(x, acc):
    acc.count += 1
    acc.total = acc.total + 2.5
    return x * acc.count + acc.total


def subscript_augmented_assignment(x):
    stats = {"sum": x * 0, "n": 0}
    for row in x:
        stats["sum"] += row
        stats["n"] += 1
    values = [x, x]
    values[1] *= 3
    return stats, values


def finfo_masking(scores, mask):
    neg = torch.finfo(scores.dtype).min
    big = torch.iinfo(torch.int32).max
    return scores.masked_fill(~mask, neg).softmax(-1), big


def masking_args(i):
    return randn(3, 4), torch.tensor([[True, True, False, False]] * 3)


def unbound_tensor_methods(x, y):
    return torch.Tensor.add(x, y), torch.Tensor.relu(x), torch.Tensor.sum(y, dim=0)


def dynamic_functional_lookup(x, name):
    return getattr(F, name)(x), getattr(torch, "tanh")(x)


def builtins_applied_to_tensors(x):
    return abs(x), pow(x, 2), len(x), max(x.shape), divmod(7, 2)


def type_conversion_between_tensors(x, y):
    return x.type_as(y.double()), x.to(y), x.to(device=y.device, dtype=torch.float64), x.long().to(x)


def unbind_split_zip(x):
    rows = x.unbind(0)
    cols = list(zip(*[r.split(2) for r in rows]))
    return [torch.stack(c).sum() for c in cols], len(rows)


def half_slicing_with_shape_arithmetic(x):
    half = x.shape[0] // 2
    return x[:half] + x[half : 2 * half], x[-half:], x[: x.shape[0] - 1 : 2]


def fstring_format_specs(x, lr):
    tag = f"lr={lr:.2e}|{lr!r}|{'x':>3}|{len(x):02d}"
    return {tag: x * lr}


def where_with_python_scalars(x):
    return torch.where(x > 0, x, 0.0), torch.where(x < 0, -1, 1), torch.clamp(x, -0.1)


def comprehension_shadowing_outer_name(x):
    i = 10
    squares = [i * i for i in range(3)]
    return x * i + sum(squares), i


def lambda_in_comprehension_binding(x):
    scalers = {k: (lambda t, k=k: t * k) for k in (1, 2)}
    return [scalers[k](x) for k in sorted(scalers)]


def iter_next_on_lists(xs):
    it = iter(xs)
    first = next(it)
    second = next(it)
    rest = list(it)
    return first + second, len(rest), next(iter([]), "empty")


def store_global_tensor(x):
    global LAST_OUTPUT
    LAST_OUTPUT = x.sigmoid()
    return LAST_OUTPUT * 2


CASES = [
    (unary_operators, lambda i: (randn(3, 4), 5)),
    (class_context_manager, mat),
    (generator_context_manager, mat),
    (subscript_augmented_assignment, mat),
    (finfo_masking, masking_args),
    (unbound_tensor_methods, lambda i: (randn(3, 4), randn(3, 4))),
    (dynamic_functional_lookup, lambda i: (randn(3, 4), "silu")),
    (builtins_applied_to_tensors, mat),
    (type_conversion_between_tensors, lambda i: (randn(3, 4), randn(3, 4))),
    (unbind_split_zip, mat),
    (half_slicing_with_shape_arithmetic, lambda i: (randn(5, 2),)),
    (fstring_format_specs, lambda i: (randn(3, 4), 3e-4)),
    (where_with_python_scalars, mat),
    (comprehension_shadowing_outer_name, mat),
    (lambda_in_comprehension_binding, mat),
    (iter_next_on_lists, lambda i: ([randn(2) for _ in range(4)],)),
]


@pytest.mark.parametrize(
    "program,make_args", CASES, ids=[f"{fn.__name__}-{n}" for n, (fn, _) in enumerate(CASES)]
)
def test_bytecode_corner(program, make_args):
    check_fn(program, make_args)


def test_attribute_augmented_assignment_on_argument_object():
    compiled = surge.compile(attribute_augmented_assignment, backend=RecordingBackend())
    mine, theirs = Accumulator(), Accumulator()
    for _ in range(3):
        x = randn(3)
        torch.testing.assert_close(compiled(x, mine), attribute_augmented_assignment(x.clone(), theirs))
        assert (mine.count, mine.total) == (theirs.count, theirs.total)


def test_store_global_tensor(monkeypatch):
    monkeypatch.setitem(globals(), "LAST_OUTPUT", None)
    compiled = surge.compile(store_global_tensor, backend=RecordingBackend())
    for _ in range(2):
        x = randn(3)
        out = compiled(x)
        torch.testing.assert_close(LAST_OUTPUT, x.sigmoid())
        torch.testing.assert_close(out, x.sigmoid() * 2)


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


class ExplicitSuper(Base):
    def forward(self, x):
        return super(ExplicitSuper, self).forward(x).relu() + Base.forward(self, x)


class ParamsDrivenDtype(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        dtype = next(self.parameters()).dtype
        h = self.fc(x.to(dtype))
        n_linear = sum(1 for m in self.modules() if isinstance(m, nn.Linear))
        names = [name for name, _ in self.named_modules()]
        return h * n_linear, names, self.fc.weight.dtype, self.fc.weight.device


@pytest.mark.parametrize("module_cls", [ExplicitSuper, ParamsDrivenDtype], ids=lambda c: c.__name__)
def test_module_corner(module_cls):
    check_module(module_cls().eval(), lambda i: (randn(2, 4),))
