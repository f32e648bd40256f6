"""Sharp corners of Python semantics inside captured programs: mutable defaults,
global/nonlocal writes, dict merging, range objects, star-unpacking into calls,
shapes used as Python tuples, containers built from tensors' metadata."""
import dataclasses
import math

import pytest
import torch

import surge
from corpus_harness import Args, RecordingBackend, check_fn, compare_call, randn

CALLS_SEEN = 0


def mat(i):
    return (randn(3, 4),)


def range_objects(x):
    r = range(2, 11, 3)
    return x * len(r) + r[1] + r[-1], list(reversed(range(3))), 5 in r, r.index(8)


def dict_merging(x):
    base = {"lr": 0.1, "wd": 0.0}
    override = {"wd": 0.01}
    merged = {**base, **override, "x": x}
    piped = base | override
    built = dict(zip(["a", "b"], [x, x * 2]), c=x * 3)
    return merged, piped, built


def star_args_into_calls(x):
    shape = (*x.shape[:-1], 2, -1)
    dims = [0, 2, 1]
    opts = {"dim": -1, "keepdim": True}
    return x.view(*shape).permute(*dims).sum(**opts), shape


def size_compared_with_tuples(x):
    same = x.shape == (3, 4)
    size_eq = x.size() == torch.Size([3, 4])
    listed = list(x.shape)
    return x * math.prod(x.shape) + len(listed), same, size_eq, listed, tuple(x.size())


def tensors_from_python_lists(x):
    table = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    dims = torch.tensor(x.shape)
    return x * table + dims.sum(), x.new_tensor([0.5, 0.25, 0.125, 1.0]) * x


def nested_unpacking_in_for(xs, ys):
    out = []
    for i, (a, (b, c)) in enumerate(zip(xs, zip(ys, xs[::-1]))):
        out.append(a * b - c * i)
    return out


def xs_ys(i):
    return [randn(3) for _ in range(3)], [randn(3) for _ in range(3)]


def comprehension_conditions_over_outer_names(x):
    limit = 3
    picked = [k * x for k in range(6) if k % 2 == 0 if k < limit]
    pairs = [(i, j) for i in range(3) for j in range(i) if i + j > 1]
    return picked, pairs


def del_and_rebind(x):
    tmp = x * 2
    keep = tmp + 1
    del tmp
    tmp = keep.sum()
    return tmp


def is_and_equality_on_python_objects(x, mode):
    sentinel = object()
    chosen = sentinel if mode is None else mode
    if chosen is sentinel:
        return x.clone(), "default"
    return x * 2, chosen


def sum_with_start_and_builtins_on_tensors_lists(xs):
    total = sum(xs, torch.zeros(3))
    biggest = max(len(xs), 2)
    return total, biggest, min([t.shape[0] for t in xs])


def string_iteration_and_join(x):
    name = "qkv"
    parts = {ch: x * (i + 1) for i, ch in enumerate(name)}
    return parts, "".join(reversed(name)), name[::-1], name[1:]


def integer_and_float_edge_arithmetic(x):
    return x * (7 // -2) + (7 % -3) + (-7 // 2) + (2 ** -1) + round(2.5) + round(-0.5), 1e300 * 10, 3 / 2


def nested_function_closes_over_argument_and_default(x, scale=2.0):
    def apply(t, power=2):
        return (t * scale) ** power

    return apply(x), apply(x, power=3)


def lambda_sort_key_on_python_values(x):
    layers = [("fc2", 2), ("fc1", 1), ("fc3", 3)]
    ordered = sorted(layers, key=lambda item: item[1])
    return x * ordered[0][1], [name for name, _ in ordered]


class Node:
    def __init__(self, value, child=None):
        self.value = value
        self.child = child


def attribute_chain_on_python_objects(x):
    root = Node(1.0, Node(2.0, Node(3.0)))
    total = 0.0
    node = root
    while node is not None:
        total += node.value
        node = node.child
    return x * total


def bool_of_containers_and_none(x, extra):
    used = []
    if extra:
        used.append("extra")
    if not used:
        used.append("none")
    return x + len(used), used


CASES = [
    (range_objects, mat),
    (dict_merging, mat),
    (star_args_into_calls, mat),
    (size_compared_with_tuples, mat),
    (tensors_from_python_lists, mat),
    (nested_unpacking_in_for, xs_ys),
    (comprehension_conditions_over_outer_names, mat),
    (del_and_rebind, mat),
    (is_and_equality_on_python_objects, lambda i: (randn(3), None)),
    (is_and_equality_on_python_objects, lambda i: (randn(3), "given")),
    (sum_with_start_and_builtins_on_tensors_lists, lambda i: ([randn(3) for _ in range(4)],)),
    (string_iteration_and_join, mat),
    (integer_and_float_edge_arithmetic, mat),
    (nested_function_closes_over_argument_and_default, mat),
    (lambda_sort_key_on_python_values, mat),
    (attribute_chain_on_python_objects, mat),
    (bool_of_containers_and_none, lambda i: (randn(3), {})),
    (bool_of_containers_and_none, lambda i: (randn(3), [0])),
]


@pytest.mark.parametrize(
    "program,make_args", CASES, ids=[f"{fn.__name__}-{n}" for n, (fn, _) in enumerate(CASES)]
)
def test_python_corner(program, make_args):
    check_fn(program, make_args)


def test_mutable_default_argument_grows_every_call():
    def tracked(x, seen=[]):  # noqa: B006 (the mutable default is the point)
        seen.append(1)
        return x * len(seen)

    compiled = surge.compile(tracked, backend=RecordingBackend())
    for expected_len in range(1, 4):
        x = randn(3)
        torch.testing.assert_close(compiled(x), x * expected_len)
    assert tracked.__defaults__[0] == [1, 1, 1]


def test_changed_defaults_are_honoured():
    def scaled(x, factor=2.0):
        return x * factor

    compiled = surge.compile(scaled, backend=RecordingBackend())
    compare_call(compiled, scaled, (randn(3),))
    scaled.__defaults__ = (5.0,)
    compare_call(compiled, scaled, (randn(3),))


def test_changed_keyword_only_defaults_are_honoured():
    def scaled(x, *, factor=2.0):
        return x * factor

    compiled = surge.compile(scaled, backend=RecordingBackend())
    compare_call(compiled, scaled, (randn(3),))
    scaled.__kwdefaults__ = {"factor": -1.0}
    compare_call(compiled, scaled, (randn(3),))


def counts_its_calls(x):
    global CALLS_SEEN
    CALLS_SEEN += 1
    return x * CALLS_SEEN


def test_global_written_by_the_program(monkeypatch):
    monkeypatch.setitem(globals(), "CALLS_SEEN", 0)
    compiled = surge.compile(counts_its_calls, backend=RecordingBackend())
    for expected in range(1, 4):
        x = randn(3)
        torch.testing.assert_close(compiled(x), x * expected)
        assert CALLS_SEEN == expected


def test_nonlocal_counter_written_by_the_program():
    def make_counter():
        count = 0

        def step(x):
            nonlocal count
            count += 1
            return x + count

        return step

    step = make_counter()
    compiled = surge.compile(step, backend=RecordingBackend())
    for expected in range(1, 4):
        x = randn(3)
        torch.testing.assert_close(compiled(x), x + expected)


def test_class_attribute_changed_through_instance_lookup():
    class Settings:
        scale = 2.0

    settings = Settings()

    def scaled(x):
        return x * settings.scale

    compiled = surge.compile(scaled, backend=RecordingBackend())
    compare_call(compiled, scaled, (randn(3),))
    Settings.scale = 7.0
    compare_call(compiled, scaled, (randn(3),))
    settings.scale = -1.0  # now an instance attribute shadows the class one
    compare_call(compiled, scaled, (randn(3),))


def test_list_or_tuple_argument_type_changes_result():
    def describe(xs):
        kind = "list" if isinstance(xs, list) else "tuple"
        return torch.stack(list(xs)).sum(0), kind

    compiled = surge.compile(describe, backend=RecordingBackend())
    compare_call(compiled, describe, ([randn(2), randn(2)],))
    compare_call(compiled, describe, ((randn(2), randn(2)),))


def test_dict_argument_value_changed_recompiles():
    def scaled(x, cfg):
        return x * cfg["scale"]

    backend = RecordingBackend()
    compiled = surge.compile(scaled, backend=backend)
    compare_call(compiled, scaled, Args(randn(3), {"scale": 2.0}))
    compare_call(compiled, scaled, Args(randn(3), {"scale": 3.0}))
    assert len(backend.graphs) == 2


def test_set_frozenset_and_bytes_arguments():
    def select(x, enabled, frozen, blob):
        out = x
        if "scale" in enabled:
            out = out * 2
        if "shift" in frozen:
            out = out + len(blob)
        return out, sorted(enabled | frozen), blob[::-1]

    backend = RecordingBackend()
    compiled = surge.compile(select, backend=backend)
    compare_call(compiled, select, (randn(3), {"scale"}, frozenset({"shift"}), b"abc"))
    compare_call(compiled, select, (randn(3), {"scale"}, frozenset({"shift"}), b"abc"))
    compare_call(compiled, select, (randn(3), {"other"}, frozenset({"shift"}), b"abc"))
    compare_call(compiled, select, (randn(3), {"other"}, frozenset(), b"abcd"))  # no tensor work: no graph
    assert len(backend.graphs) == 2 and surge.counters["cache_hits"] == 1


def test_dataclass_argument_mutated_by_program():
    @dataclasses.dataclass
    class State:
        step: int
        history: list

    def advance(x, state):
        state.step += 1
        state.history.append(state.step)
        return x * state.step

    compiled = surge.compile(advance, backend=RecordingBackend())
    mine, theirs = State(0, []), State(0, [])
    for _ in range(3):
        x = randn(3)
        torch.testing.assert_close(compiled(x, mine), advance(x, theirs))
    assert mine == theirs
