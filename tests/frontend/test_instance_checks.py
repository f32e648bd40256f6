"""isinstance / issubclass follow the metaclass's own __instancecheck__ /
__subclasscheck__, as eager Python does: torch's legacy tensor types and typed
storages, nn.Parameter, user metaclasses (traced, their reads guarded)."""
import collections.abc
import warnings

import torch

import surge
from frontend_helpers import compile_strict, same


def test_legacy_tensor_types_check_dtype():
    def f(x):
        return (isinstance(x, torch.FloatTensor), isinstance(x, torch.DoubleTensor),
                isinstance(x, torch.nn.Parameter), isinstance(x, (int, torch.Tensor)), x + 1)

    compiled, rec = compile_strict(f)
    for x in [torch.randn(4), torch.randn(4, dtype=torch.float64), torch.nn.Parameter(torch.randn(3))]:
        same(compiled(x), f(x))
    assert len(rec.graphs) == 3


def test_legacy_tensor_type_of_an_intermediate():
    def f(x):
        y = x.double()
        return y * 2 if isinstance(y, torch.DoubleTensor) else y - 2

    compiled, rec = compile_strict(f, fullgraph=True)
    x = torch.randn(4)
    same(compiled(x), f(x))
    assert len(rec.graphs) == 1


class FlagMeta(type):
    def __instancecheck__(cls, inst):
        return getattr(inst, "flag", False)

    def __subclasscheck__(cls, sub):
        return sub.__name__.startswith("Yes")


class Marker(metaclass=FlagMeta):
    pass


class Plain:
    pass


class YesMarked:
    pass


def test_user_metaclass_hooks_are_traced_and_guarded():
    def f(x, o):
        return (x + (1 if isinstance(o, Marker) else 0) + (10 if issubclass(YesMarked, Marker) else 0)
                + (100 if issubclass(Plain, Marker) else 0))

    compiled, rec = compile_strict(f)
    o, x = Plain(), torch.zeros(1)
    same(compiled(x, o), f(x, o))
    same(compiled(x, o), f(x, o))
    o.flag = True
    same(compiled(x, o), f(x, o))
    assert len(rec.graphs) == 2 and surge.counters["cache_hits"] == 1


def test_typed_storage_check_is_answered_as_eager_answers():
    def f(x, storage):
        return x + (1 if isinstance(storage, torch.FloatStorage) else 0) \
            + (10 if isinstance(storage, torch.DoubleStorage) else 0)

    compiled = surge.compile(f, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        storages = [torch.FloatStorage(2), torch.DoubleStorage(2)]
    x = torch.zeros(1)
    for storage in storages:
        same(compiled(x, storage), f(x, storage))


def test_abc_checks_keep_answering_from_the_type():
    def f(x, d):
        return x * 2 if isinstance(d, collections.abc.Mapping) and issubclass(dict, collections.abc.Mapping) else x

    compiled, rec = compile_strict(f, fullgraph=True)
    x = torch.randn(3)
    same(compiled(x, {"a": 1}), f(x, {"a": 1}))
    assert len(rec.graphs) == 1
