"""Tuples, lists, dicts and sets: building, methods, comprehensions, slicing
(negative steps included), unpacking (starred too), zip/enumerate/sorted/reversed."""
import collections

import pytest
import torch

from corpus_harness import Args, check_fn, randn


def mat(i):
    return (randn(3, 4),)


def tensor_list(i):
    return ([randn(3, 4) for _ in range(4)],)


def list_methods(x):
    items = [x, x * 2]
    items.append(x * 3)
    items.extend([x + 1, x - 1])
    items.insert(0, -x)
    last = items.pop()
    del items[1]
    items.reverse()
    return items, last, len(items)


def list_index_count_contains(x):
    sizes = [3, 4, 3, 5]
    return x * sizes.index(5) + sizes.count(3), 4 in sizes, sizes[::-1], sizes[-2:]


def list_slicing_negative_steps(xs):
    return [t * 2 for t in xs[::-1]], xs[-1:0:-2], xs[1:-1], xs[::2]


def list_slice_assignment_and_del(xs):
    ys = list(xs)
    ys[1:3] = [ys[1] * 2]
    del ys[0]
    return ys


def list_concat_and_repeat(x):
    a = [x, x + 1]
    b = a + [x * 2]
    c = [0] * 3
    return b, c, a * 2


def dict_building_and_methods(x):
    d = {"a": x, "b": x * 2}
    d["c"] = x + 1
    d.update({"d": x - 1}, e=x.sum())
    popped = d.pop("a")
    got = d.get("zz", 5)
    default = d.setdefault("f", x * 0)
    return d, popped, got, default, list(d.keys()), "c" in d


def dict_iteration(tensors):
    out = {}
    for name, t in tensors.items():
        out[name.upper()] = t.relu()
    total = sum(v.sum() for v in tensors.values())
    return out, total, sorted(tensors)


def tensor_dict(i):
    return ({"q": randn(3), "k": randn(3), "v": randn(3)},)


def dict_comprehension_with_condition(x):
    return {f"p{i}": x ** i for i in range(5) if i % 2 == 1}


def list_comprehension_nested(x):
    rows = [[x[i, j] for j in range(2)] for i in range(3)]
    return [torch.stack(r) for r in rows]


def set_comprehension_and_ops(x):
    a = {i % 3 for i in range(10)}
    b = {1, 5}
    return x * len(a | b), sorted(a & b), sorted(a - b), sorted(a ^ b)


def generator_expression_sum(xs):
    return sum(t.mean() for t in xs), max(len(t.shape) for t in xs)


def tuple_unpacking_and_swap(x):
    a, b = x, x * 2
    a, b = b, a
    (c, d), e = (a.sum(), b.sum()), 3
    return a - b, c + d * e


def starred_unpacking(xs):
    first, *middle, last = xs
    head, *_ = middle
    return first + last, len(middle), head


def starred_call_and_literal(xs):
    merged = [*xs[:2], xs[-1]]
    return torch.stack([*merged]), (*xs[1:3],)


def zip_enumerate_reversed_sorted(xs):
    scales = [0.5, 1.0, 1.5, 2.0]
    outs = [t * s for t, s in zip(xs, scales)]
    idx = [i for i, _ in enumerate(xs)]
    order = sorted(range(4), key=lambda k: -scales[k])
    return outs, idx, list(reversed(idx)), order


def zip_strict_three_way(xs):
    return [a * b + c for a, b, c in zip(xs, xs[1:], xs[2:])]


def ordered_dict_and_defaultdict(x):
    od = collections.OrderedDict()
    od["w"] = x
    od["b"] = x.sum(0)
    counts = collections.defaultdict(int)
    for k in ["a", "b", "a"]:
        counts[k] += 1
    return od, dict(counts)


def dict_of_lists(x):
    groups = {"even": [], "odd": []}
    for i in range(4):
        groups["even" if i % 2 == 0 else "odd"].append(x * i)
    return {k: torch.stack(v) for k, v in groups.items()}


def tuple_methods_and_compare(x):
    shape = tuple(x.shape)
    return x.reshape(shape[::-1]), shape.index(4), shape.count(3), shape < (4, 0), shape + (1,)


def list_sort_in_place(x):
    widths = [3, 1, 2]
    widths.sort(reverse=True)
    return x[:, : widths[0]], widths


def any_all_on_lists(x):
    flags = [x.shape[0] > 1, x.shape[1] > 10]
    return x * int(any(flags)) + int(all(flags)), any(flags), all(flags)


def list_of_tensors_as_input_mutated_copy(xs):
    ys = xs.copy()
    ys[0] = ys[0] * 100
    return ys, len(xs)


def map_and_filter(xs):
    doubled = list(map(lambda t: t * 2, xs))
    kept = list(filter(lambda k: k > 1, [0, 1, 2, 3]))
    return doubled, kept


def nested_container_inputs(batch):
    feats = batch["features"]
    a, b = batch["pair"]
    return feats.sum() + a * b[0], batch["meta"]["name"]


def nested_batch(i):
    return ({"features": randn(3), "pair": (randn(2), [randn(1)]), "meta": {"name": "train"}},)


def dict_keys_views(x):
    d = {"x": x, "y": x + 1}
    return [k for k in d.keys()], [v * 2 for v in d.values()], [(k, v) for k, v in d.items()]


Batch = collections.namedtuple("Batch", ["inputs", "labels", "size"])


def namedtuple_input(batch):
    logits = batch.inputs * 2
    inputs, labels, size = batch
    return (logits - labels).pow(2).sum() / size, batch._replace(size=size + 1)


def namedtuple_batch(i):
    return (Batch(randn(3, 4), randn(3, 4), 3),)


CASES = [
    (namedtuple_input, namedtuple_batch),
    (list_methods, mat),
    (list_index_count_contains, mat),
    (list_slicing_negative_steps, tensor_list),
    (list_slice_assignment_and_del, tensor_list),
    (list_concat_and_repeat, mat),
    (dict_building_and_methods, mat),
    (dict_iteration, tensor_dict),
    (dict_comprehension_with_condition, mat),
    (list_comprehension_nested, mat),
    (set_comprehension_and_ops, mat),
    (generator_expression_sum, tensor_list),
    (tuple_unpacking_and_swap, mat),
    (starred_unpacking, tensor_list),
    (starred_call_and_literal, tensor_list),
    (zip_enumerate_reversed_sorted, tensor_list),
    (zip_strict_three_way, tensor_list),
    (ordered_dict_and_defaultdict, mat),
    (dict_of_lists, mat),
    (tuple_methods_and_compare, mat),
    (list_sort_in_place, mat),
    (any_all_on_lists, mat),
    (list_of_tensors_as_input_mutated_copy, tensor_list),
    (map_and_filter, tensor_list),
    (nested_container_inputs, nested_batch),
    (dict_keys_views, mat),
]


@pytest.mark.parametrize("program,make_args", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_container_program(program, make_args):
    check_fn(program, make_args)


def test_list_argument_length_change_recompiles():
    check_fn(starred_unpacking, lambda i: ([randn(2) for _ in range(4 + i)],), graphs=2)


def test_dict_argument_keys_change_recompiles():
    def weighted(d):
        return sum(v * len(k) for k, v in d.items())

    keys = [("a", "bb"), ("a", "ccc")]
    check_fn(weighted, lambda i: ({k: randn(3) for k in keys[i]},), graphs=2)


def test_input_list_mutation_is_visible_to_caller():
    def push(xs, x):
        xs.append(x * 2)
        return x + 1

    check_fn(push, lambda i: Args([randn(2)], randn(2)))
