"""Python values that are not tensors: numbers, strings, builtins, math, f-strings,
constants, config objects, chained comparisons and `is None` checks."""
import dataclasses
import enum
import math
import operator

import pytest
import torch

from corpus_harness import Args, check_fn, randn


def mat(i):
    return (randn(3, 4),)


def builtins_on_python_values(x):
    sizes = [x.shape[0], x.shape[1], 7]
    return x * (min(sizes) + max(sizes) + sum(sizes) + abs(-3) + len(sizes)), max(3, 9, 2), min(sizes)


def builtins_round_divmod_pow(x):
    q, r = divmod(17, 5)
    return x * round(2.6) + q - r + pow(2, 3), int(3.9), float(2), bool(0)


def math_module(x):
    scale = math.sqrt(x.shape[-1]) + math.log(2.0) + math.pi - math.floor(2.7) + math.ceil(0.2)
    return x / scale, math.exp(1.0), math.cos(0.0), math.isclose(1.0, 1.0 + 1e-12)


def math_inf_and_gcd(x):
    limit = math.inf if x.dim() == 2 else 1.0
    return x.clamp(max=limit), math.gcd(12, 18), math.prod([2, 3, 4])


def fstring_keys(x):
    out = {}
    for i in range(3):
        out[f"layer_{i}"] = x * i
    out[f"{x.shape[0]}x{x.shape[1]}"] = x.sum()
    return out


def string_methods(x):
    name = "Layer.Norm"
    parts = name.lower().split(".")
    key = "_".join(parts) + str(len(parts))
    return {key: x, name.upper(): x + 1}, name.startswith("Lay"), name.replace(".", "/")


def string_format_and_join(x):
    label = "{}-{:03d}".format("blk", 7)
    names = ", ".join(f"h{i}" for i in range(3))
    return x * len(label), label, names, "%s/%d" % ("a", 3)


def chained_comparison_on_numbers(x, lo, hi):
    n = x.shape[0]
    if lo <= n < hi:
        return x * 2
    return x - 1


def chained_args(i):
    return Args(randn(3, 4), 1, 5)


def is_none_check(x, bias=None):
    out = x * 2
    if bias is not None:
        out = out + bias
    return out


def is_none_args_none(i):
    return Args(randn(3, 4))


def is_none_args_tensor(i):
    return Args(randn(3, 4), bias=randn(4))


def boolean_logic(x, flag_a, flag_b):
    if flag_a and not flag_b:
        x = x + 1
    if flag_a or flag_b:
        x = x * 2
    enabled = flag_a if flag_b else "off"
    return x, enabled


def ternary_and_truthiness(x, scale):
    factor = scale or 1.0
    items = []
    label = "empty" if not items else "full"
    return x * factor, label, bool(items)


def integer_arithmetic(x, n):
    heads = n // 3
    rest = n % 3
    return x * heads + rest, n << 2, n >> 1, n & 5, n | 8, n ^ 3, -n, ~n


def float_arithmetic(x, s):
    return x * (s ** 2) / (s + 1.0) - s // 0.25, s % 0.3, 1.5 * s


class Activation(enum.Enum):
    RELU = "relu"
    TANH = "tanh"


def enum_dispatch(x, act):
    if act is Activation.RELU:
        return torch.relu(x)
    if act == Activation.TANH:
        return torch.tanh(x)
    return x


@dataclasses.dataclass
class Config:
    hidden: int = 4
    scale: float = 0.5
    use_bias: bool = True
    name: str = "cfg"


def config_object(x, cfg):
    out = x[:, : cfg.hidden] * cfg.scale
    if cfg.use_bias:
        out = out + 1
    return out, cfg.name


class PlainSettings:
    def __init__(self):
        self.eps = 1e-5
        self.dims = (3, 4)


def plain_object_attributes(x, settings):
    return x.reshape(settings.dims) / (x.std() + settings.eps)


def getattr_hasattr_isinstance(x, cfg):
    width = getattr(cfg, "hidden", 2)
    missing = getattr(cfg, "nonexistent", 3)
    out = x[:, :width] * missing
    if hasattr(cfg, "scale") and isinstance(cfg.scale, float):
        out = out * cfg.scale
    return out, isinstance(x, torch.Tensor), isinstance(width, (int, float))


def operator_module(x):
    return operator.add(x, 1), operator.mul(2, 3), operator.getitem([4, 5], 1), operator.neg(x)


def constants_and_tuples(x):
    weights = (0.25, 0.5, 0.25)
    acc = 0
    for w in weights:
        acc = acc + x * w
    return acc, weights, None, ..., True


def type_and_identity_checks(x):
    kind = type(x).__name__
    same = type(x) is torch.Tensor
    return x + 1, kind, same, callable(torch.relu)


def python_number_from_shape(x):
    rows, cols = x.shape
    scale = 1.0 / math.sqrt(rows * cols)
    return x * scale, rows * cols, x.shape[-1] / 2


def walrus_and_conditional_expr(x):
    if (n := x.shape[0]) > 2:
        x = x * n
    return x, n


def hash_and_id_free_sets(x):
    seen = {1, 2, 3}
    seen.add(4)
    seen.discard(1)
    return x * len(seen), 4 in seen, 1 not in seen, sorted(seen)


def slice_objects(x):
    window = slice(1, 3)
    return x[:, window], x[window.start:], window.stop


def str_repr_of_numbers(x, n):
    tag = str(n) + repr(2.5)
    return {tag: x * n}


def dtype_as_python_value(x, dtype):
    return x.to(dtype) + torch.ones(4, dtype=dtype), str(dtype), dtype.is_floating_point


CASES = [
    (builtins_on_python_values, mat),
    (builtins_round_divmod_pow, mat),
    (math_module, mat),
    (math_inf_and_gcd, mat),
    (fstring_keys, mat),
    (string_methods, mat),
    (string_format_and_join, mat),
    (chained_comparison_on_numbers, chained_args),
    (chained_comparison_on_numbers, lambda i: Args(randn(3, 4), lo=4, hi=5)),
    (is_none_check, is_none_args_none),
    (is_none_check, is_none_args_tensor),
    (boolean_logic, lambda i: (randn(3, 4), True, False)),
    (boolean_logic, lambda i: (randn(3, 4), False, True)),
    (ternary_and_truthiness, lambda i: (randn(3, 4), 0.0)),
    (integer_arithmetic, lambda i: (randn(3, 4), 11)),
    (float_arithmetic, lambda i: (randn(3, 4), 1.75)),
    (enum_dispatch, lambda i: (randn(3, 4), Activation.RELU)),
    (enum_dispatch, lambda i: (randn(3, 4), Activation.TANH)),
    (config_object, lambda i: (randn(3, 6), Config(hidden=3, scale=2.0))),
    (config_object, lambda i: (randn(3, 6), Config(use_bias=False, name="nb"))),
    (plain_object_attributes, lambda i: (randn(12), PlainSettings())),
    (getattr_hasattr_isinstance, lambda i: (randn(3, 6), Config())),
    (operator_module, mat),
    (constants_and_tuples, mat),
    (type_and_identity_checks, mat),
    (python_number_from_shape, mat),
    (walrus_and_conditional_expr, mat),
    (hash_and_id_free_sets, mat),
    (slice_objects, mat),
    (str_repr_of_numbers, lambda i: (randn(3, 4), 3)),
    (dtype_as_python_value, lambda i: (randn(4), torch.float64)),
]


@pytest.mark.parametrize(
    "program,make_args", CASES, ids=[f"{fn.__name__}-{n}" for n, (fn, _) in enumerate(CASES)]
)
def test_python_value_program(program, make_args):
    check_fn(program, make_args)


def test_different_python_number_per_call_recompiles():
    # Two distinct ints steer the trace (they select heads and rest): two graphs.
    check_fn(integer_arithmetic, lambda i: (randn(3, 4), 11 + i), graphs=2)


def test_same_python_number_per_call_hits_cache():
    check_fn(float_arithmetic, lambda i: (randn(3, 4), 0.5), graphs=1)
