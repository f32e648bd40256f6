"""Values real model code returns or reaches, captured in one graph: closures and
iterators returned, module-level tensors reached through an import inside the
function, functools.partial objects, HF-style ModelOutput dicts."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import torch

import module_tensors
import surge
from frontend_helpers import compile_strict, same
from graph_checks import check_one_graph


def returns_closure(x):
    y = x * 2

    def shift(z):
        return z + y
    return shift, y


def test_returned_closure_sees_the_graph_values():
    compiled, rec = compile_strict(returns_closure)
    for _ in range(2):
        x = torch.randn(3)
        shift, y = compiled(x)
        eager_shift, eager_y = returns_closure(x)
        same(y, eager_y)
        same(shift(x), eager_shift(x))
        assert shift.__code__ is eager_shift.__code__
    assert len(rec.graphs) == 1 and surge.counters["graph_breaks"] == 0 and surge.counters["fallbacks"] == 0


def test_returned_lambdas_inside_containers():
    def lambdas(x):
        y = x.cos()
        return [lambda z: z * y], {"k": lambda: y + 1}

    compiled, rec = compile_strict(lambdas)
    x = torch.randn(3)
    out, expected = compiled(x), lambdas(x)
    same(out[0][0](x), expected[0][0](x))
    same(out[1]["k"](), expected[1]["k"]())
    assert len(rec.graphs) == 1 and surge.counters["fallbacks"] == 0


def test_returned_iterator():
    def iterator(x):
        it = iter([x, x + 1, x * 2])
        next(it)
        return it

    compiled, rec = compile_strict(iterator)
    x = torch.randn(3)
    out = compiled(x)
    same(list(out), list(iterator(x)))
    assert len(rec.graphs) == 1 and surge.counters["fallbacks"] == 0


def test_module_level_tensor_through_an_import_inside_the_function():
    def uses_import(x):
        import module_tensors as table_module
        from module_tensors import TABLE
        return x + table_module.TABLE * table_module.SCALE + TABLE

    rec = check_one_graph(uses_import, lambda i: (torch.randn(4),))
    assert sum(n.op == "placeholder" for n in rec.graphs[0].graph.nodes) == 2  # x and the table: an input
    compiled, _ = compile_strict(uses_import)
    compiled(torch.randn(4))
    old = module_tensors.TABLE
    try:
        module_tensors.TABLE = torch.ones(4)  # rebinding the module attribute is seen
        x = torch.randn(4)
        same(compiled(x), uses_import(x))
    finally:
        module_tensors.TABLE = old


def test_partial_objects_made_and_passed():
    def scale(x, k, shift=0.0):
        return x * k + shift

    def made_inside(x):
        double = functools.partial(scale, k=2.0)
        add = functools.partial(torch.add, alpha=3)
        return double(x, shift=1.0), add(x, x)

    check_one_graph(made_inside, lambda i: (torch.randn(3),))

    def passed_in(x, fn):
        return fn(x)

    check_one_graph(passed_in, lambda i: (torch.randn(3), functools.partial(scale, k=4.0)))


def test_partial_returned_and_alive_where_a_torch_op_raises_inside_a_try():
    def returned(x):
        return functools.partial(torch.add, x * 2, alpha=3)

    compiled, rec = compile_strict(returned)
    x, y = torch.randn(3), torch.randn(3)
    add = compiled(x)
    assert type(add) is functools.partial and add.keywords == {"alpha": 3}
    same(add(y), returned(x)(y))
    assert len(rec.graphs) == 1

    def caught(x):
        join = functools.partial(torch.cat, dim=0)
        try:
            y = join([x, x.new_zeros(2, 5)])  # the sizes do not match: RuntimeError
        except RuntimeError:
            y = join([x, x]) * 2
        return y

    compiled, _ = compile_strict(caught)
    for _ in range(2):
        x = torch.randn(3, 4)
        same(compiled(x), caught(x))
    assert surge.counters["fallbacks"] == 0 and surge.counters["graph_breaks"] == 1


def test_model_output_dict_methods():
    from transformers.utils import ModelOutput

    @dataclass
    class Output(ModelOutput):
        logits: torch.Tensor = None
        hidden: Optional[torch.Tensor] = None
        extra: Optional[torch.Tensor] = None

    def model_output(x):
        out = Output(logits=x * 2, hidden=x + 1)
        return (out.to_tuple(), list(out.keys()), out[0], out["hidden"], tuple(out),
                [v for v in out.values()], [k for k, _ in out.items()], len(out))

    check_one_graph(model_output, lambda i: (torch.randn(3),))


def test_closures_nested_in_closure_cells_at_a_break_keep_their_cells_apart():
    def nested(x):
        log = []

        def inner():
            log.append(1)
            return log

        def outer():
            return inner()
        print("break")  # both closures and both cells are rebuilt here
        outer()
        return x + 1, log, outer() is log, inner.__closure__[0].cell_contents is log

    compiled, _ = compile_strict(nested)
    for _ in range(2):
        x = torch.randn(3)
        same(compiled(x), nested(x))
    assert surge.counters["fallbacks"] == 0


def test_partial_of_a_partial_is_flattened_and_its_members_read():
    def nested(x):
        inner = functools.partial(torch.add, x)
        outer = functools.partial(inner, alpha=2)
        return (outer(x), outer.func is torch.add, outer.args[0] is x, outer.keywords, outer.args is outer.args,
                outer.keywords is outer.keywords)

    check_one_graph(nested, lambda i: (torch.randn(3),))


def test_a_container_method_loaded_for_a_call_whose_argument_breaks():
    def loaded(x):
        items, table = [1], {}
        items.append(print("break") or 2)
        table.setdefault("k", print("break") or 3)
        return x + 1, items, table

    compiled, _ = compile_strict(loaded)
    for _ in range(2):
        x = torch.randn(3)
        same(compiled(x), loaded(x))
    assert surge.counters["fallbacks"] == 0


def test_a_defaultdict_from_the_caller_keeps_its_factory():
    import collections

    def reads(x, table):
        table["missing"].append(1)  # made by the factory, as eager makes it
        copied = table.copy()
        return x + len(table["missing"]), copied.default_factory, type(copied).__name__, sorted(copied)

    compiled, _ = compile_strict(reads)
    for _ in range(2):
        x = torch.randn(3)
        mine, theirs = collections.defaultdict(list, a=[0]), collections.defaultdict(list, a=[0])
        same(compiled(x, mine), reads(x, theirs))
        assert mine == theirs
