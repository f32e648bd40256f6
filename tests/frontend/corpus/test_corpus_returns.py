"""Return values rebuilt exactly as eager returns them: nested tuples/lists/dicts,
dataclasses, namedtuples, Python values next to tensors, inputs returned as is."""
import collections
import dataclasses
import typing

import pytest
import torch

import surge
from corpus_harness import RecordingBackend, check_fn, randn


def mat(i):
    return (randn(3, 4),)


@dataclasses.dataclass
class ModelOutput:
    logits: torch.Tensor
    loss: typing.Optional[torch.Tensor] = None
    hidden: tuple = ()
    step: int = 0


@dataclasses.dataclass(frozen=True)
class FrozenStats:
    mean: torch.Tensor
    std: torch.Tensor
    name: str


Pair = collections.namedtuple("Pair", ["first", "second"])


class Moments(typing.NamedTuple):
    mean: torch.Tensor
    var: torch.Tensor
    count: int


def returns_nested_tuples_and_lists(x):
    return (x + 1, [x * 2, (x - 1, [x.sum()])]), [()]


def returns_dict_of_dicts(x):
    return {"stats": {"mean": x.mean(), "max": x.max()}, "rows": [r for r in x * 2], "n": x.shape[0]}


def returns_dataclass(x):
    logits = x @ x.t()
    return ModelOutput(logits=logits, loss=logits.mean(), hidden=(x, x.relu()), step=3)


def returns_dataclass_with_default_none(x):
    return ModelOutput(x.softmax(-1))


def returns_frozen_dataclass(x):
    return FrozenStats(mean=x.mean(0), std=x.std(0), name=f"rows={x.shape[0]}")


def returns_namedtuples(x):
    return Pair(x + 1, Pair(x * 2, None)), Moments(x.mean(), x.var(), x.numel())


def returns_list_of_dataclasses(x):
    return [ModelOutput(logits=x * i, step=i) for i in range(3)]


def returns_python_values_only_next_to_tensor(x):
    return x * 1.0, 3, 2.5, "label", True, None, torch.float32, x.shape


def returns_input_unchanged_and_computed(x, y):
    return x, y * 2


def returns_same_tensor_twice(x):
    y = x.exp()
    return y, y, {"again": y}


def returns_view_of_input(x):
    return x[1:], x.t(), x.view(-1)


def returns_single_element_tuple(x):
    return (x.sum(),)


def returns_empty_containers_and_tensor(x):
    return x - 1, [], {}, ()


def returns_scalar_tensor_and_int_tensor(x):
    return x.sum(), x.argmax(), (x > 0).sum(), x.max(dim=1)


def returns_torch_return_types(x):
    # torch.max with dim returns a structseq (torch.return_types.max).
    return torch.max(x, dim=0), torch.sort(x, dim=1)


def returns_dict_with_int_and_tuple_keys(x):
    return {0: x, (1, 2): x + 1, "s": x * 2}


def returns_generator_materialized(x):
    return tuple(x * k for k in range(3))


CASES = [
    (returns_nested_tuples_and_lists, mat),
    (returns_dict_of_dicts, mat),
    (returns_dataclass, mat),
    (returns_dataclass_with_default_none, mat),
    (returns_frozen_dataclass, mat),
    (returns_namedtuples, mat),
    (returns_list_of_dataclasses, mat),
    (returns_python_values_only_next_to_tensor, mat),
    (returns_input_unchanged_and_computed, lambda i: (randn(3), randn(3))),
    (returns_same_tensor_twice, mat),
    (returns_view_of_input, mat),
    (returns_single_element_tuple, mat),
    (returns_empty_containers_and_tensor, mat),
    (returns_scalar_tensor_and_int_tensor, mat),
    (returns_torch_return_types, mat),
    (returns_dict_with_int_and_tuple_keys, mat),
    (returns_generator_materialized, mat),
]


@pytest.mark.parametrize("program,make_args", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_return_structure(program, make_args):
    check_fn(program, make_args)


def test_returned_input_is_the_same_object():
    compiled = surge.compile(returns_input_unchanged_and_computed, backend=RecordingBackend())
    for _ in range(2):
        x, y = randn(3), randn(3)
        out_x, _ = compiled(x, y)
        assert out_x is x


def test_returned_aliases_stay_aliases():
    compiled = surge.compile(returns_same_tensor_twice, backend=RecordingBackend())
    for _ in range(2):
        a, b, d = compiled(randn(3, 4))
        assert a is b and d["again"] is a


def test_returned_view_shares_storage_with_input():
    compiled = surge.compile(returns_view_of_input, backend=RecordingBackend())
    x = randn(3, 4)
    tail, _, flat = compiled(x)
    x.mul_(0).add_(7)
    assert torch.all(tail == 7) and torch.all(flat == 7), "a view of an input must alias it, as in eager"


class Summary:
    def __init__(self, total, label):
        self.total = total
        self.label = label


def returns_user_object_created_inside(x):
    return Summary(x.sum(0), f"n={x.shape[0]}"), x * 2


def test_user_object_created_inside_is_rebuilt():
    compiled = surge.compile(returns_user_object_created_inside, backend=RecordingBackend())
    for _ in range(2):
        x = randn(3, 4)
        summary, doubled = compiled(x)
        assert type(summary) is Summary and summary.label == "n=3"
        torch.testing.assert_close(summary.total, x.sum(0))
        torch.testing.assert_close(doubled, x * 2)


def returns_closure_created_inside(x):
    rows = x.shape[0]
    return (lambda t: t * rows), x + 1


def test_closure_created_inside_is_callable_afterwards():
    compiled = surge.compile(returns_closure_created_inside, backend=RecordingBackend())
    for _ in range(2):
        x = randn(3, 4)
        scale_rows, shifted = compiled(x)
        y = randn(2)
        torch.testing.assert_close(scale_rows(y), y * 3)
        torch.testing.assert_close(shifted, x + 1)


def returns_assorted_python_objects(x):
    return x * 2, slice(1, None, 2), range(3), frozenset({1, 2}), {3, 4}, b"ab", complex(1, 2), (1, [2, {"k": (3,)}])


def test_assorted_python_objects_returned():
    check_fn(returns_assorted_python_objects, mat)


def test_returned_input_containers_and_objects_keep_identity():
    def passthrough(x, xs, cfg, table):
        xs.append(x * 2)
        return xs, cfg, table, x + 1

    compiled = surge.compile(passthrough, backend=RecordingBackend())
    for _ in range(2):
        xs, cfg, table = [randn(2)], Summary(1, "c"), {"k": 1}
        out_xs, out_cfg, out_table, _ = compiled(randn(2), xs, cfg, table)
        assert out_xs is xs and out_cfg is cfg and out_table is table
        assert len(xs) == 2
