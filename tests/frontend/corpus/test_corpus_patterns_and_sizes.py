"""Structural pattern matching, imports inside functions, walrus in comprehensions,
and torch.Size arithmetic whose result types are easy to get wrong."""
import dataclasses

import pytest
import torch

import surge
from corpus_harness import CounterDelta, RecordingBackend, check_fn, compare_call, randn


@dataclasses.dataclass
class Act:
    kind: str
    slope: float = 0.0


def match_mapping_pattern(x, spec):
    match spec:
        case {"kind": "relu"}:
            return x.relu(), "relu"
        case {"kind": kind, **rest}:
            return x.clone(), f"{kind} {sorted(rest)}"
        case _:
            return x * 2, "default"


def match_class_pattern(x, spec):
    match spec:
        case Act(kind="leaky", slope=s):
            return torch.nn.functional.leaky_relu(x, s), f"leaky {s}"
        case str() as name if name.startswith("t"):
            return x.tanh(), name
        case _:
            return x.clone(), "default"


def match_sequence_pattern(x, spec):
    match spec:
        case [first, *rest]:
            return x * first + len(rest), "sequence"
        case ():
            return x.clone(), "empty"
        case _:
            return x * 3, "default"


def import_inside_function(x):
    import math

    from torch.nn import functional as F

    return F.gelu(x) * math.e


def walrus_in_comprehension(x):
    scaled = [y for v in (0.5, 1.0, 2.0) if (y := v * 2) > 1.5]
    return [x * y for y in scaled], scaled


def size_arithmetic(x):
    s = x.shape
    return s[1:], s + (1,), s[::-1], len(s), s.numel(), torch.Size([2, 3]), x.size(dim=1)


def view_with_size_objects(x):
    target = torch.Size([x.shape[0], -1])
    return x.view(target), x.reshape(x.shape[:1] + (2, -1))


def torch_predicates(x, p):
    return (
        torch.is_tensor(x),
        torch.numel(x),
        torch.is_floating_point(x),
        isinstance(p, torch.nn.Parameter),
        type(x) is torch.Tensor,
        x * getattr(torch, "float64").itemsize,
    )


@pytest.mark.parametrize(
    "program,make_args",
    [
        (match_mapping_pattern, lambda i: (randn(3), {"kind": "relu", "extra": 1})),
        (match_mapping_pattern, lambda i: (randn(3), {"kind": "gelu", "b": 1, "a": 2})),
        (match_class_pattern, lambda i: (randn(3), Act("leaky", 0.2))),
        (match_class_pattern, lambda i: (randn(3), "tanh")),
        (match_sequence_pattern, lambda i: (randn(3), [2.0, 3, 4])),
        (match_sequence_pattern, lambda i: (randn(3), 42)),
        (import_inside_function, lambda i: (randn(3),)),
        (walrus_in_comprehension, lambda i: (randn(3),)),
        (view_with_size_objects, lambda i: (randn(3, 4),)),
        (torch_predicates, lambda i: (randn(3), torch.nn.Parameter(randn(2)))),
    ],
    ids=["match-mapping", "match-mapping-rest", "match-class", "match-class-guard", "match-sequence", "match-default",
         "local-import", "walrus-comprehension", "size-view", "torch-predicates"],
)
def test_pattern_or_size_program(program, make_args):
    check_fn(program, make_args)


def test_size_arithmetic_alone_hands_no_graph_to_the_backend():
    backend = RecordingBackend()
    compiled = surge.compile(size_arithmetic, backend=backend)
    delta = CounterDelta()
    for _ in range(2):
        compare_call(compiled, size_arithmetic, (randn(2, 3, 4),))
    assert backend.graphs == [] and delta["graphs"] == 0 and delta["fallbacks"] == 0
    assert delta["cache_misses"] == 1 and delta["cache_hits"] == 1
