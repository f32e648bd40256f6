"""Values and names that are awkward to write into generated guard source: infinite
floats, odd strings and dict keys, keyword-named **kwargs, unicode and
shadowing parameter names, big ints, tensors held in defaults and cells."""
import pytest
import torch
import torch.nn as nn

import surge
from corpus_harness import Args, RecordingBackend, check_fn, check_module, compare_call, randn


def shifted(x, s):
    return x + (0.0 if s != s else max(min(s, 1e6), -1e6)), s


@pytest.mark.parametrize(
    "value",
    [float("inf"), float("-inf"), 0.1 + 0.2, 1e-300, 2**70, -(2**63), True],
    ids=["inf", "-inf", "0.30000000000000004", "tiny", "2**70", "-2**63", "true"],
)
def test_awkward_numbers_as_arguments(value):
    check_fn(shifted, lambda i: (randn(3), value))


def tagged(x, tag):
    return {tag: x * len(tag)}, tag.upper()


@pytest.mark.parametrize(
    "tag",
    ["it's", 'say "hi"', "back\\slash", "new\nline", "tab\tand\u00e9", "{braces}", "%s %d"],
    ids=["quote", "double-quote", "backslash", "newline", "unicode", "braces", "percent"],
)
def test_awkward_strings_as_arguments(tag):
    check_fn(tagged, lambda i: (randn(3), tag))


def test_awkward_dict_keys_in_argument():
    def weighted(feats):
        return sum(v * (i + 1) for i, v in enumerate(feats.values())), list(feats)

    keys = ["a-b", "with space", 3, None, (1, "a"), "it's", 2.5, False]
    check_fn(weighted, lambda i: ({k: randn(2) for k in keys},))


def test_keyword_named_kwargs():
    def pick(**kw):
        return kw["class"] * 2 + kw["lambda"], sorted(kw)

    check_fn(pick, lambda i: Args(**{"class": randn(3), "lambda": randn(3), "if": 1}))


def test_parameter_names_that_shadow_common_names():
    def shadowing(L, G, torch, self, fn, args, kwargs, guards):
        return L + G * self - fn, torch, args, kwargs, guards

    check_fn(shadowing, lambda i: (randn(3), randn(3), "t", randn(3), randn(3), (1,), {"k": 2}, None))


def test_unicode_parameter_names():
    def scaled(x, α=2.0, β=None):
        return x * α if β is None else x * α + β

    check_fn(scaled, lambda i: Args(randn(3), α=3.0))
    check_fn(scaled, lambda i: Args(randn(3), β=randn(3)))


def test_tensor_default_argument_mutated_in_place():
    def biased(x, bias=torch.zeros(3)):
        return x + bias

    compiled = surge.compile(biased, backend=RecordingBackend())
    compare_call(compiled, biased, (randn(3),))
    biased.__defaults__[0].add_(4.0)
    compare_call(compiled, biased, (randn(3),))


def test_tensor_in_closure_cell_mutated_in_place():
    scale = torch.ones(3)

    def scaled(x):
        return x * scale

    backend = RecordingBackend()
    compiled = surge.compile(scaled, backend=backend)
    compare_call(compiled, scaled, (randn(3),))
    scale.mul_(-2.0)
    compare_call(compiled, scaled, (randn(3),))
    assert len(backend.graphs) == 1


def test_many_tensor_arguments():
    def total(*xs):
        out = xs[0]
        for i, t in enumerate(xs[1:]):
            out = out + t * (i % 3)
        return out

    check_fn(total, lambda i: tuple(randn(2) for _ in range(40)))


def test_module_dict_with_numeric_keys():
    class Numbered(nn.Module):
        def __init__(self):
            super().__init__()
            self.stages = nn.ModuleDict({str(k): nn.Linear(4, 4) for k in range(3)})

        def forward(self, x):
            for key in ("2", "0", "1"):
                x = self.stages[key](x).relu()
            return x

    check_module(Numbered(), lambda i: (randn(2, 4),))
