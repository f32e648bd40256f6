"""User functions inlined into the caller's graph: closures, defaults, keyword-only
arguments, *args/**kwargs forwarding, nested functions, lambdas, recursion on
Python values, decorators written by users, methods and classmethods."""
import functools

import pytest
import torch
import torch.nn.functional as F

from corpus_harness import Args, check_fn, randn


def mat(i):
    return (randn(3, 4),)


def callee_scale(t, factor=2.0):
    return t * factor


def callee_kwonly(t, *, bias=0.0, squash=False):
    out = t + bias
    return torch.tanh(out) if squash else out


def callee_varargs(*tensors, weight=1.0):
    return sum(tensors) * weight


def callee_kwargs(t, **options):
    out = t
    for name in sorted(options):
        out = out + options[name]
    return out, sorted(options)


def calls_callee_with_defaults(x):
    return callee_scale(x), callee_scale(x, 3), callee_scale(t=x, factor=0.5)


def calls_keyword_only(x):
    return callee_kwonly(x, bias=1.0), callee_kwonly(x, squash=True), callee_kwonly(x)


def forwards_args_and_kwargs(x, *args, **kwargs):
    return callee_varargs(x, *args, **kwargs)


def forwards_kwargs_dict(x):
    opts = {"alpha": 1.0, "beta": 2.0}
    return callee_kwargs(x, **opts, gamma=3.0)


def closure_over_local_value(x):
    scale = x.shape[1]

    def inner(t):
        return t * scale

    return inner(x) + inner(x.flip(0))


def closure_mutated_with_nonlocal(x):
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        return t + count

    y = bump(bump(x))
    return y, count


def closures_capturing_loop_variables(x):
    # The classic late-binding pitfall: every lambda sees the last i, unless bound.
    late = [lambda t: t * i for i in range(3)]
    bound = [lambda t, i=i: t * i for i in range(3)]
    return [f(x) for f in late], [f(x) for f in bound]


def nested_function_three_levels(x):
    def outer(t):
        def middle(u):
            def leaf(v):
                return v.relu()

            return leaf(u) * 2

        return middle(t) + 1

    return outer(x)


def lambda_applied(x):
    act = lambda t: F.gelu(t) * 0.5  # noqa: E731
    return act(x), (lambda a, b=2: a ** b)(x)


def recursive_on_python_value(x, depth=3):
    if depth == 0:
        return x
    return recursive_on_python_value(torch.sin(x), depth - 1) + depth


def functools_partial_call(x):
    leaky = functools.partial(F.leaky_relu, negative_slope=0.2)
    scale3 = functools.partial(callee_scale, factor=3.0)
    return leaky(x), scale3(x)


def user_decorator(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2

    return wrapper


@user_decorator
def decorated_callee(t, shift=1.0):
    return t + shift


def calls_decorated_callee(x):
    return decorated_callee(x), decorated_callee(x, shift=-1.0)


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def apply(self, t):
        return t * self.factor

    @classmethod
    def unit(cls):
        return cls(1.0)

    @staticmethod
    def shift(t):
        return t + 1

    @property
    def doubled(self):
        return self.factor * 2

    def __call__(self, t):
        return self.apply(t) - 1


def uses_user_class(x, scaler):
    return scaler.apply(x), Scaler.shift(x), Scaler.unit().apply(x), x * scaler.doubled, scaler(x)


def object_created_inside(x):
    s = Scaler(0.25)
    s.factor = s.factor * 2
    return s.apply(x), s.factor


def default_argument_mutable_read(x, sizes=(2, 2)):
    return x[: sizes[0], : sizes[1]] * len(sizes)


def keyword_only_on_compiled_function(x, *, mode="sum", dim=0):
    if mode == "sum":
        return x.sum(dim)
    return x.mean(dim)


def positional_only_parameters(x, y, /, scale=1.0):
    return (x - y) * scale


def function_returning_function(x):
    def make_act(kind):
        if kind == "relu":
            return torch.relu
        return torch.sigmoid

    return make_act("relu")(x) + make_act("other")(x)


def higher_order_map(x):
    fns = [torch.relu, torch.tanh, callee_scale, lambda t: t.abs()]
    return [fn(x) for fn in fns]


def generator_function_consumed(x):
    def layers(n):
        for i in range(n):
            yield i * 0.5

    out = x
    for s in layers(3):
        out = out + s
    return out


def global_function_table(x):
    return ACTIVATIONS["gelu"](x) + ACTIVATIONS["silu"](x)


ACTIVATIONS = {"gelu": F.gelu, "silu": F.silu}


def args_kwargs_passthrough_mlp(x, w1, w2, *rest, act=F.relu, **extra):
    h = act(x @ w1)
    for r in rest:
        h = h + r
    if extra.get("dropout_free", True):
        h = h @ w2
    return h


def mlp_args(i):
    return Args(randn(2, 4), randn(4, 6), randn(6, 3), randn(6), act=torch.tanh, dropout_free=True)


CASES = [
    (calls_callee_with_defaults, mat),
    (calls_keyword_only, mat),
    (forwards_args_and_kwargs, lambda i: Args(randn(3), randn(3), randn(3), weight=0.5)),
    (forwards_args_and_kwargs, lambda i: Args(randn(3))),
    (forwards_kwargs_dict, mat),
    (closure_over_local_value, mat),
    (closure_mutated_with_nonlocal, mat),
    (closures_capturing_loop_variables, mat),
    (nested_function_three_levels, mat),
    (lambda_applied, mat),
    (recursive_on_python_value, mat),
    (functools_partial_call, mat),
    (calls_decorated_callee, mat),
    (uses_user_class, lambda i: (randn(3, 4), Scaler(3.0))),
    (object_created_inside, mat),
    (default_argument_mutable_read, mat),
    (keyword_only_on_compiled_function, lambda i: Args(randn(3, 4), mode="mean", dim=1)),
    (keyword_only_on_compiled_function, lambda i: Args(randn(3, 4))),
    (positional_only_parameters, lambda i: Args(randn(3), randn(3), scale=2.0)),
    (function_returning_function, mat),
    (higher_order_map, mat),
    (generator_function_consumed, mat),
    (global_function_table, mat),
    (args_kwargs_passthrough_mlp, mlp_args),
]


@pytest.mark.parametrize(
    "program,make_args", CASES, ids=[f"{fn.__name__}-{n}" for n, (fn, _) in enumerate(CASES)]
)
def test_function_program(program, make_args):
    check_fn(program, make_args)


def test_method_of_user_object_compiled_directly():
    scaler = Scaler(1.5)
    check_fn(scaler.apply, mat)


def test_user_decorated_function_compiled():
    check_fn(decorated_callee, mat)


def test_lambda_compiled_directly():
    check_fn(lambda x, y: torch.relu(x) * y + 1, lambda i: (randn(3), randn(3)))


def test_closure_defined_in_test_captures_tensor():
    bias = randn(4)

    def add_bias(x):
        return x + bias

    check_fn(add_bias, mat)


def test_keyword_argument_change_recompiles():
    check_fn(keyword_only_on_compiled_function, lambda i: Args(randn(3, 4), mode=["sum", "mean"][i]), graphs=2)
