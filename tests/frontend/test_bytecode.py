"""The interpreter over Python 3.11 and 3.12 bytecode: constructs whose bytecode differs."""
import contextlib
import sys

import pytest
import torch

from frontend_helpers import compile_strict, same
from surge.frontend.bytecode import decode
from surge.frontend.interpreter.registry import HANDLERS


def test_handlers_are_registered_for_this_python_only():
    if sys.version_info[:2] == (3, 11):
        assert "LOAD_METHOD" in HANDLERS and "PRECALL" in HANDLERS and "END_FOR" not in HANDLERS
    else:
        assert "END_FOR" in HANDLERS and "LOAD_FAST_AND_CLEAR" in HANDLERS and "LOAD_METHOD" not in HANDLERS


def test_every_opcode_of_these_programs_has_a_handler():
    for fn in PROGRAMS:
        for inst in decode(fn.__code__).instructions:
            assert inst.opname in HANDLERS, (fn.__name__, inst.opname)


def comprehensions(xs):
    squares = [x * x for x in xs if x.dim() == 1]
    table = {f"k{i}": x for i, x in enumerate(xs)}
    nested = [[a + b for b in xs[:2]] for a in xs[:2]]
    return sum(squares), table, nested, {len(x.shape) for x in xs}, tuple(x.sum() for x in xs)


def unpacking_and_slicing(xs):
    first, *middle, last = xs
    (a, b), c = (xs[0], xs[1]), xs[-1]
    return first + last, len(middle), a * b + c, xs[::-2], xs[1:-1]


def control_flow(x, n):
    total = x
    i = 0
    while i < n:
        i += 1 if i < 10 else 2
        if i % 2 == 0 and not i == 3:
            total = total + i
        elif 1 < i <= 5:
            total = total - 1
        else:
            continue
        total = total * 0.5
    for j in range(3):
        if j == 2:
            break
        total = total * 1.5
    else:
        total = total * 100
    return total, (y := n * 2), y


def exceptions(x, key):
    table = {"a": 1.0}
    try:
        scale = table[key]
    except KeyError:
        scale = -1.0
    try:
        idx = [1, 2][5]
    except (IndexError, ValueError):
        idx = 0
    finally:
        scale = scale * 2
    return x * scale + idx


def closures_and_defaults(x, *args, k=3, **kw):
    def inner(t, bias=kw.get("bias", 0.0)):
        return t * k + bias
    adders = [lambda t, i=i: t + i for i in range(3)]
    return inner(x) + sum(f(x) for f in adders) + len(args)


@contextlib.contextmanager
def scaled_context(values):
    values.append(1)
    yield len(values)
    values.append(2)


def with_blocks(x):
    values = []
    with torch.no_grad():
        y = x * 2
    with scaled_context(values) as n:
        z = y * n
    with contextlib.nullcontext():
        z = z + len(values)
    return z, y.requires_grad, values


def generators(x):
    def gen(n):
        for i in range(n):
            yield x * i
    g = gen(3)
    first = next(g)
    return first, list(g), sum(t.sum() for t in gen(2))


def strings_and_formatting(x, name):
    key = f"{name}_{x.shape[0]:03d}!r{name!r}"
    parts = "-".join(str(d) for d in x.shape)
    return {key: x * 2, parts.upper(): x.dim()}


PROGRAMS = [comprehensions, unpacking_and_slicing, control_flow, exceptions, closures_and_defaults,
            with_blocks, generators, strings_and_formatting]

ARGS = {
    "comprehensions": lambda: ([torch.randn(3), torch.randn(3), torch.randn(3)],),
    "unpacking_and_slicing": lambda: ([torch.randn(2) for _ in range(5)],),
    "control_flow": lambda: (torch.randn(3), 6),
    "exceptions": lambda: (torch.randn(3), "b"),
    "closures_and_defaults": lambda: (torch.randn(3), 1, 2),
    "with_blocks": lambda: (torch.randn(3, requires_grad=True),),
    "generators": lambda: (torch.randn(3),),
    "strings_and_formatting": lambda: (torch.randn(4, 2), "w"),
}


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_program_matches_eager_in_one_graph(program):
    compiled, rec = compile_strict(program, fullgraph=True)
    for _ in range(2):
        args = ARGS[program.__name__]()
        same(compiled(*args), program(*args))
    assert len(rec.graphs) == 1


def test_exception_path_taken_only_when_raised():
    compiled, rec = compile_strict(exceptions)
    x = torch.randn(2)
    same(compiled(x, "a"), exceptions(x, "a"))
    same(compiled(x, "zz"), exceptions(x, "zz"))
    assert len(rec.graphs) == 2


def test_frame_snapshot_records_stack_locals_and_with_blocks():
    """The state a graph break needs at an instruction: stack, locals, open `with` blocks."""
    from surge.frontend.interpreter import Frame
    from surge.frontend.interpreter.registry import HANDLERS as handlers
    from surge.frontend.tracer import Tracer
    from surge.frontend.binding import bind_root
    from surge.options import Options

    def f(x):
        with torch.no_grad():
            y = x * 2
            surge_marker = y + 1  # noqa: F841
        return y

    snapshots = []
    original = handlers["STORE_FAST"]

    def recording_store(frame, inst):
        original(frame, inst)
        if inst.argval == "surge_marker":
            snapshots.append(frame.snapshot())

    handlers["STORE_FAST"] = recording_store
    try:
        tracer = Tracer(Options())
        x = torch.randn(2)
        frame = Frame(tracer, f.__code__, f.__globals__, bind_root(tracer, f, (x,), {}), {})
        frame.run()
    finally:
        handlers["STORE_FAST"] = original
    (snap,) = snapshots
    assert {"x", "y", "surge_marker"} <= set(snap.locals)
    assert len(snap.blocks) == 1 and snap.blocks[0].target_mode is False
    assert snap.stack  # the with block's __exit__ is on the stack


def test_yield_from_delegates_and_returns_the_inner_value():
    def inner(x):
        yield x
        yield x * 2
        return 7

    def outer(x):
        result = yield from inner(x)
        yield x + result

    def f(x):
        return sum(outer(x)), list(outer(x))[-1]

    compiled, rec = compile_strict(f, fullgraph=True)
    x = torch.randn(3)
    same(compiled(x), f(x))
    assert len(rec.graphs) == 1
