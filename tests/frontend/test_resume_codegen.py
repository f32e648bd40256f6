"""Resume functions and break code against plain CPython on hand-written functions.

For every call (and tensor-bool branch) in each function, the function runs
as: its own code up to that instruction (the frame state is handed off
there), then either the resume function for that instruction or the break
code that runs the instruction in CPython and continues in the resume
function of the next one. Results, printed output, side-effect order and
exceptions must match running the function unchanged.
"""
from __future__ import annotations

import dis
import sys
import traceback

import pytest
import torch

from resume_helpers import break_offsets, layout_at, outcome, run_with_break
from surge.frontend.break_code import break_code
from surge.frontend.codegen_bytecode import BytecodeError, dump, live_locals, stack_depths
from surge.frontend.codegen_bytecode.analysis import call_start
from surge.frontend.codegen_bytecode.layout import FrameLayout, Slot
from surge.frontend.resume import resume_code


@pytest.fixture(autouse=True)
def _restore_grad_mode():
    # A known gap (an exception escaping re-entered break code) leaves grad mode
    # off; later tests must not inherit that.
    enabled = torch.is_grad_enabled()
    yield
    torch.set_grad_enabled(enabled)

EVENTS: list = []
COUNTER = 0


def note(value):
    EVENTS.append(value if not isinstance(value, torch.Tensor) else value.sum().item())
    return value


def boom(value):
    raise ValueError(f"boom {value}")


class Recorder:
    def __init__(self, tag):
        self.tag = tag

    def __enter__(self):
        print("enter", self.tag)
        return self

    def __exit__(self, *exc):
        print("exit", self.tag, exc[0].__name__ if exc[0] else None)
        return False


class Model:
    def __init__(self):
        self.scale = 2.0

    def step(self, x):
        return x * self.scale


# -- the corpus -----------------------------------------------------------------------------

def straight(a, b):
    x = a + 1
    print("x", x.sum().item())
    y = x * b
    note(y)
    return y + 2


def mid_expression(a, b):
    return a + note(b) * 2 - note(a)


def keyword_call(a, b):
    y = note(value=a * 2)
    return y + sorted([3, 1, 2], reverse=True)[0] * b


def for_loop(a, n):
    acc = a
    for i in range(n):
        acc = acc + i
        print("iter", i, acc.sum().item())
    return acc


def nested_loops(a):
    out = []
    for i in range(2):
        for j in range(3):
            if j == 1:
                continue
            out.append(note(a * (i + j)))
    return torch.stack(out)


def while_loop(a):
    k = 0
    while k < 4:
        a = a * 1.5
        note(a)
        k += 1
        if k == 3:
            break
    return a, k


def tensor_branch(a):
    if a.sum() > 0:
        b = a * 2
    else:
        b = a - 3
    note(b)
    return b


def grad_mode(a):
    b = flag = None  # read after the block if __exit__ swallowed an exception: keep them bound
    with torch.no_grad():
        b = a * 2
        note(b)
        flag = torch.is_grad_enabled()
    return b, flag, torch.is_grad_enabled()


def nested_with(a):
    b = inner = outer = None
    with torch.no_grad():
        with torch.enable_grad():
            b = a * 3
            note(b)
            inner = torch.is_grad_enabled()
        outer = torch.is_grad_enabled()
    return b, inner, outer


def with_in_loop(a):
    total = a
    for i in range(3):
        with torch.no_grad():
            total = total + i
            note(total)
    return total, torch.is_grad_enabled()


def with_raises(a):
    with torch.no_grad():
        note(a)
        boom(1)
    return a


def with_as(a):
    tag = None
    with Recorder("r") as rec:
        note(a)
        tag = rec.tag
    return tag


def try_finally(a):
    try:
        b = a + 1
        note(b)
        return b
    finally:
        print("finally", a.sum().item())


def try_except(a):
    try:
        note(a)
        boom(2)
        print("not reached")
    except ValueError as exc:
        print("caught", exc)
        a = a * 10
    return a


def except_in_loop(a):
    results = []
    for i in range(3):
        try:
            if i == 1:
                boom(i)
            results.append(note(a + i))
        except ValueError:
            results.append(a * 0)
    return torch.stack(results)


def propagates(a):
    b = a * 2
    note(b)
    return boom(b.sum().item())


def closure_cells(a):
    scale = 3

    def inner(x):
        return x * scale

    note(a)
    scale = 5  # the closure made before the break sees this write
    return inner(a)


def nonlocal_writes(a):
    count = 0

    def bump():
        nonlocal count
        count += 1

    bump()
    note(a)
    bump()
    return a * count


def make_free_var_user(k):
    def uses_free(a):
        note(a)
        return a * k

    return uses_free


uses_free = make_free_var_user(7)


def method_calls(a):
    m = Model()
    y = m.step(a)
    note(y)
    return m.step(y).sum()


def list_mutation(a, items):
    items.append(note(a.sum().item()))
    items.append(len(items))
    return items


def global_write(a):
    global COUNTER
    COUNTER += 1
    note(a)
    COUNTER += 10
    return COUNTER


def dead_and_unbound(a, flag):
    if flag:
        late = a * 2
    note(a)
    if flag:
        return late
    return a


def unpacking(a):
    x, y = note(a), note(a + 1)
    first, *rest = [x, y, 3]
    return first + rest[0], rest[1]


def comprehension(a):
    parts = [note(a * i) for i in range(3)]
    return sum(parts)


CASES = [
    (straight, lambda: (torch.randn(3), torch.randn(3))),
    (mid_expression, lambda: (torch.randn(3), torch.randn(3))),
    (keyword_call, lambda: (torch.randn(3), torch.randn(3))),
    (for_loop, lambda: (torch.randn(2), 3)),
    (nested_loops, lambda: (torch.randn(2),)),
    (while_loop, lambda: (torch.randn(2),)),
    (tensor_branch, lambda: (torch.randn(4),)),
    (tensor_branch, lambda: (-torch.rand(4) - 1,)),
    (grad_mode, lambda: (torch.randn(2, requires_grad=True),)),
    (nested_with, lambda: (torch.randn(2, requires_grad=True),)),
    (with_in_loop, lambda: (torch.randn(2),)),
    (with_raises, lambda: (torch.randn(2),)),
    (with_as, lambda: (torch.randn(2),)),
    (try_finally, lambda: (torch.randn(2),)),
    (try_except, lambda: (torch.randn(2),)),
    (except_in_loop, lambda: (torch.randn(2),)),
    (propagates, lambda: (torch.randn(2),)),
    (closure_cells, lambda: (torch.randn(2),)),
    (nonlocal_writes, lambda: (torch.randn(2),)),
    (uses_free, lambda: (torch.randn(2),)),
    (method_calls, lambda: (torch.randn(2),)),
    (list_mutation, lambda: (torch.randn(2), [1])),
    (global_write, lambda: (torch.randn(2),)),
    (dead_and_unbound, lambda: (torch.randn(2), True)),
    (unpacking, lambda: (torch.randn(2),)),
    (comprehension, lambda: (torch.randn(2),)),
]

FN_OF = {fn.__code__: fn for fn, _ in CASES}

BRANCHES = ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE",
            "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE")


def _clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else list(a) if isinstance(a, list) else a for a in args)


def _observe(fn, args, with_break_at=None, use_break_code=True):
    global COUNTER
    EVENTS.clear()
    COUNTER = 0
    grad = torch.is_grad_enabled()
    if with_break_at is None:
        result, printed = outcome(lambda: fn(*args))
    else:
        result, printed = outcome(lambda: run_with_break(fn, args, with_break_at, use_break_code=use_break_code))
    assert torch.is_grad_enabled() == grad
    return result, printed, list(EVENTS), COUNTER, args


def _same(x, y):
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.shape == y.shape and torch.allclose(x, y)
    if isinstance(x, (tuple, list)):
        return type(x) is type(y) and len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    return x == y


# Known gaps of these layouts, kept visible: a `with` slot re-enters its manager
# (exact for grad modes, not for a user manager with effects; capture passes a
# user manager's __exit__ as a plain value instead); a live local that is unbound
# at the break (assigned on one branch only; 3.12's inlined comprehension
# variables) cannot be passed as a parameter (capture leaves it out of the
# layout); an exception escaping re-entered break code leaves grad mode off.
KNOWN_GAPS = {"with_as", "dead_and_unbound", "with_raises"}
KNOWN_GAPS_312 = {"comprehension"}  # the saved loop variable: a NULL passed as a value


def _param(case):
    gaps = KNOWN_GAPS | (KNOWN_GAPS_312 if sys.version_info >= (3, 12) else set())
    marks = [pytest.mark.xfail(reason="known gap")] if case[0].__name__ in gaps else []
    return pytest.param(case, id=case[0].__name__, marks=marks)


@pytest.mark.parametrize("use_break_code", [True, False], ids=["break_code", "resume_at"])
@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_split_matches_cpython(case, use_break_code):
    fn, make_args = case
    args = make_args()
    expected = _observe(fn, _clone(args))
    offsets = break_offsets(fn, ("CALL",) + BRANCHES)
    assert offsets
    for offset in offsets:
        got = _observe(fn, _clone(args), with_break_at=offset, use_break_code=use_break_code)
        where = f"{fn.__name__} at offset {offset}"
        assert _same(got[0], expected[0]), where
        assert got[1] == expected[1], where   # printed output, in order
        assert got[2] == expected[2], where   # side effects, in order
        assert got[3] == expected[3], where   # global writes
        assert _same(got[4], expected[4]), where  # mutated arguments


def test_resume_functions_are_cached_per_layout():
    code = for_loop.__code__
    offset = break_offsets(for_loop)[-1]
    layout = FrameLayout(tuple(Slot.VALUE for _ in range(stack_depths(code)[call_start(code, offset)])),
                         live_locals(code, offset))
    first = resume_code(code, offset, layout)
    assert resume_code(code, offset, layout) is first
    other = FrameLayout(layout.stack, layout.live_locals[:-1])
    assert resume_code(code, offset, other) is not first


def test_resume_keeps_user_lines_in_tracebacks():
    code = propagates.__code__
    offset = break_offsets(propagates)[-1]  # boom(...)
    fn = break_code(code, offset, layout_at(FN_OF[code], call_start(code, offset))).make_function(globals())
    stack = [torch.ones(1)]
    b = torch.ones(1) * 2
    with pytest.raises(ValueError) as info:
        fn(boom, b.sum().item(), b) if False else fn(*_args_for(code, offset, {"b": b}, [boom, 2.0]))
    frames = traceback.extract_tb(info.value.__traceback__)
    lines = [f.lineno for f in frames if f.filename == __file__]
    user_line = propagates.__code__.co_firstlineno + 3
    assert user_line in lines
    assert any("return boom(b.sum().item())" in (f.line or "") for f in frames)


def _args_for(code, offset, local_values, stack_values):
    layout = layout_at(FN_OF[code], call_start(code, offset))
    return list(stack_values) + [local_values[n] for n in layout.live_locals]


def test_break_on_tensor_bool_has_two_exits():
    code = tensor_branch.__code__
    (offset,) = [o for o in break_offsets(tensor_branch, BRANCHES)]
    generated = break_code(code, offset, layout_at(FN_OF[code], offset))
    assert len(generated.exits) == 2
    fn = generated.make_function(globals())
    for value in (torch.ones(3), -torch.ones(3)):
        EVENTS.clear()
        out = fn(value.sum() > 0, value)
        assert torch.equal(out, tensor_branch(value))


def test_live_locals_skip_dead_values():
    def f(a, b):
        c = a + b
        note(c)
        d = c * 2
        return d

    offsets = break_offsets(f)
    assert live_locals(f.__code__, call_start(f.__code__, offsets[0])) == ("c",)


def test_layout_mismatch_names_user_line():
    code = straight.__code__
    offset = break_offsets(straight)[0]
    with pytest.raises(BytecodeError, match=r"stack slots .*test_resume_codegen.py:\d+"):
        resume_code(code, offset, FrameLayout((Slot.VALUE,) * 9, ()))


def test_generators_are_refused():
    def gen(a):
        yield note(a)

    offset = break_offsets(gen)[0]
    with pytest.raises(BytecodeError, match="generator"):
        resume_code(gen.__code__, offset, layout_at(gen, offset))


def test_dump_and_bytecode_log(capsys, monkeypatch):
    monkeypatch.setenv("SURGE_LOGS", "bytecode")
    code = grad_mode.__code__
    offset = break_offsets(grad_mode)[1]
    generated = break_code(code, offset, layout_at(FN_OF[code], call_start(code, offset)))
    text = dump(generated.code)
    assert "BEFORE_WITH" in text and f"code {code.co_qualname} ({code.co_filename}" in text
    assert "[surge:bytecode] break code for" in capsys.readouterr().err


def test_generated_code_is_valid_for_this_python():
    for fn, _ in CASES:
        if fn.__name__ in KNOWN_GAPS | KNOWN_GAPS_312:
            continue
        code = fn.__code__
        for offset in break_offsets(fn):
            generated = break_code(code, offset, layout_at(FN_OF[code], call_start(code, offset)))
            assert generated.code.co_filename == code.co_filename
            assert (generated.code.co_name, generated.code.co_qualname) == (code.co_name, code.co_qualname)
            list(dis.get_instructions(generated.code))  # decodes on this version
    assert sys.version_info[:2] in ((3, 11), (3, 12))
