"""Tensors a program reaches through indirect paths (closures of global functions,
partial objects, objects inside lists, class attributes, bound methods, dicts held
by modules). Reassigning such a tensor between calls must never give a stale result."""
import dataclasses
import functools

import torch
import torch.nn as nn

import surge
from corpus_harness import Args, RecordingBackend, compare_call, randn


def make_shift(shift):
    def apply(x):
        return x + shift

    def set_shift(value):
        nonlocal shift
        shift = value

    return apply, set_shift


GLOBAL_SHIFT, SET_GLOBAL_SHIFT = make_shift(torch.zeros(3))


def uses_global_function_with_closure(x):
    return GLOBAL_SHIFT(x) * 2


def test_tensor_in_closure_of_global_function():
    compiled = surge.compile(uses_global_function_with_closure, backend=RecordingBackend())
    compare_call(compiled, uses_global_function_with_closure, (randn(3),))
    SET_GLOBAL_SHIFT(randn(3))
    compare_call(compiled, uses_global_function_with_closure, (randn(3),))
    SET_GLOBAL_SHIFT(randn(2, 3))
    compare_call(compiled, uses_global_function_with_closure, (randn(3),))


def test_tensor_in_partial_keywords():
    def apply(fn, x):
        return fn(x).relu()

    compiled = surge.compile(apply, backend=RecordingBackend())
    for _ in range(2):
        compare_call(compiled, apply, (functools.partial(torch.add, other=randn(3)), randn(3)))


class Holder:
    def __init__(self, weight):
        self.weight = weight

    def project(self, x):
        return x * self.weight


def test_tensor_attribute_of_objects_in_a_list():
    def apply_all(holders, x):
        for h in holders:
            x = h.project(x)
        return x

    holders = [Holder(randn(3)), Holder(randn(3))]
    compiled = surge.compile(apply_all, backend=RecordingBackend())
    compare_call(compiled, apply_all, Args(holders, randn(3)))
    holders[1].weight = randn(3)
    compare_call(compiled, apply_all, Args(holders, randn(3)))


def test_bound_method_argument_holding_a_tensor():
    def apply(fn, x):
        return fn(x) + 1

    compiled = surge.compile(apply, backend=RecordingBackend())
    for _ in range(2):
        compare_call(compiled, apply, Args(Holder(randn(3)).project, randn(3)))


class Table:
    values = torch.arange(3.0)


def reads_class_attribute_tensor(x):
    return x + Table.values


def test_class_attribute_tensor_reassigned():
    compiled = surge.compile(reads_class_attribute_tensor, backend=RecordingBackend())
    compare_call(compiled, reads_class_attribute_tensor, (randn(3),))
    original = Table.values
    try:
        Table.values = randn(3)
        compare_call(compiled, reads_class_attribute_tensor, (randn(3),))
    finally:
        Table.values = original


@dataclasses.dataclass(frozen=True)
class Weights:
    w: torch.Tensor
    b: torch.Tensor


def test_frozen_dataclass_argument_with_tensors():
    def affine(x, p):
        return x @ p.w + p.b

    compiled = surge.compile(affine, backend=RecordingBackend())
    for _ in range(2):
        compare_call(compiled, affine, Args(randn(2, 3), Weights(randn(3, 4), randn(4))))


class CachedKeys(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.cache = {"k": torch.zeros(3)}

    def forward(self, x):
        return self.fc(x) + self.cache["k"]


def test_tensor_in_dict_attribute_of_module():
    module = CachedKeys()
    compiled = surge.compile(module, backend=RecordingBackend())
    compare_call(compiled, module, (randn(2, 3),))
    module.cache["k"] = randn(3)
    compare_call(compiled, module, (randn(2, 3),))
    module.cache = {"k": randn(3)}
    compare_call(compiled, module, (randn(2, 3),))
