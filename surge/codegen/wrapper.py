"""The host wrapper: Python source that allocates, launches kernels and calls ATen.

The generated module holds the kernels and a ``make_call(launchers)`` that
returns ``call(args)``: straight-line code with one line per allocation,
kernel launch, extern call and free, so a compiled call runs as little Python
as possible. The module is self-contained text (extern ops by qualified name,
constants as literals), so it can be cached on disk and loaded by another
process.
"""
from __future__ import annotations

import sympy
import torch

from ..lowering.ir import ExternBuffer, InputBuffer, LoopGraph, TensorArg
from ..schedule.arena import Arena, extern_operands
from ..schedule.groups import KernelGroup
from ..schedule.memory import last_input_reads
from ..schedule.scheduler import Schedule
from .common import format_index
from .extern_callees import CALLEES_PRELUDE, ExternCallees, overload_literal


class NotRepresentable(Exception):
    """A constant argument of an extern call has no Python literal."""


def python_literal(value) -> str:
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return f'float("{value}")'
        return repr(value)
    if isinstance(value, torch.dtype) or isinstance(value, torch.memory_format) or isinstance(value, torch.layout):
        return str(value)
    if isinstance(value, torch.device):
        return f'torch.device("{value.type}", {value.index})' if value.index is not None else f'torch.device("{value.type}")'
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(python_literal(v) + ", " for v in value) + ")"
    if isinstance(value, torch._ops.OpOverload):
        return overload_literal(value)
    if isinstance(value, sympy.Expr) and value.is_integer:   # a size: the host code names its symbols
        return format_index(value)
    raise NotRepresentable(f"{type(value).__name__} {value!r}")


def _shape_literal(values) -> str:
    """A shape or strides as a tuple literal; symbolic sizes as expressions of the size
    symbols, which the host code binds at the start of each call (``size_bindings``)."""
    return "(" + "".join(f"{format_index(v)}, " for v in values) + ")"


def argument_names(graph: LoopGraph) -> list:
    """The names the host code gives the call's arguments, in call order (tensors and sizes)."""
    named = [(b.position, b.name) for b in graph.inputs] + [(s.position, s.name) for s in graph.size_inputs]
    return [name for _, name in sorted(named)]


def size_bindings(graph: LoopGraph) -> list:
    """Lines that bind each size symbol from the call's arguments (a size argument that is
    the symbol, else a tensor input's size or stride), then check the guards the compiled
    code relies on. None for static graphs."""
    lines = []
    for symbol in graph.sizes.symbols:
        lines.append(f"{symbol.name} = {_size_source(graph, symbol)}")
    for guard in graph.sizes.guards:
        lines.append(f"if not ({guard_condition(guard)}):")
        lines.append(f"    raise SizeGuardFailed({('compiled for sizes with ' + str(guard))!r})")
    return lines


def guard_imports(graph: LoopGraph) -> list:
    """What the guard checks of ``size_bindings`` need, imported once in ``make_call``."""
    return ["from surge.errors import SizeGuardFailed"] if graph.sizes.guards else []


def _size_source(graph: LoopGraph, symbol) -> str:
    for s in graph.size_inputs:
        if s.expr == symbol:
            return s.name
    for b in graph.inputs:
        for d, n in enumerate(b.layout.shape):
            if n == symbol:
                return f"{b.name}.shape[{d}]"
    for b in graph.inputs:
        for d, n in enumerate(b.layout.stride):
            if n == symbol:
                return f"{b.name}.stride({d})"
    raise NotImplementedError(f"the size symbol {symbol} is no size of an input (only an expression of one)")


def guard_condition(guard) -> str:
    """A ``size_vars.Guard`` as a Python condition over the size symbols."""
    if guard.kind in ("divisible", "indivisible"):
        op = "==" if guard.kind == "divisible" else "!="
        return f"{format_index(guard.expr)} % {format_index(guard.divisor)} {op} 0"
    op = dict(eq="==", ne="!=", ge=">=", lt="<")[guard.kind]
    return f"{format_index(guard.expr)} {op} 0"


def arena_address(slot) -> str:
    """The address of an arena slot, from the arena's (``_base``, bound once per call)."""
    return "_base" if slot.offset == 0 else f"_base + {format_index(slot.offset)}"


class WrapperWriter:
    """``addresses``: kernels take integer addresses (compiled Triton kernels do, through
    their direct launch: ``runtime/launcher.py``), so the arena's buffers that only kernels
    read need no tensor: each is the arena's address plus its slot's offset, not an
    ``as_strided`` view made per call (about 1 us each, a hundred per ResNet training step
    on a GPU). Triton's interpreter reads tensors; an autotuned kernel is timed on copies
    of its arguments' storages: their host code keeps the views."""

    def __init__(self, schedule: Schedule, launch_args: dict, addresses: bool = False):
        self.schedule = schedule
        self.graph: LoopGraph = schedule.graph
        self.launch_args = launch_args      # kernel name -> (buffer names, size arguments) in param order
        self.by_name = self.graph.by_name
        self.lines: list[str] = []
        # ops returning several tensors: their result is a tuple, its elements are checked
        self.tuple_results = {b.parent for b in self.by_name.values()
                              if isinstance(b, ExternBuffer) and b.parent is not None}
        self.callees = ExternCallees()   # filled as extern lines are written
        memory = schedule.memory
        self.arena = memory.arena if memory is not None and memory.arena is not None else Arena({}, 0, 1, {})
        held = extern_operands(self.graph) | {o.arg.buffer for o in self.graph.outputs if isinstance(o.arg, TensorArg)}
        self.addressed = {n for n in self.arena.root_of if n not in held} if addresses else set()

    # -- the arena -----------------------------------------------------------------
    def slot_elements(self, name: str) -> sympy.Expr:
        """Where ``name``'s slot starts in the arena, in elements of its dtype."""
        return sympy.expand(self.arena.slot(name).offset / self.by_name[name].dtype.itemsize)

    def arena_dtypes(self) -> list:
        """The dtypes of the arena's buffers that are tensors (views of it)."""
        return sorted({self.by_name[name].dtype for name in self.arena.root_of if name not in self.addressed}, key=str)

    def arena_lines(self) -> list:
        """The one allocation of a call's arena, its address, and one typed view of it per
        dtype its tensors have."""
        lines = [f"_arena = empty_strided(({format_index(self.arena.size)}, ), (1, ), device=_device, "
                 f"dtype=torch.uint8)"]
        if self.addressed:
            lines.append("_base = _arena.data_ptr()")
        lines += [f"{arena_view(dtype)} = _arena.view({dtype})" for dtype in self.arena_dtypes()]
        return lines

    def arena_names(self) -> list:
        """What holds the arena once its last slot is dead: freed, as its buffers would be."""
        return ["_arena"] + [arena_view(dtype) for dtype in self.arena_dtypes()]

    def arena_tensor(self, name: str, layout) -> str:
        """A tensor of ``layout`` over ``name``'s slot."""
        return (f"as_strided({arena_view(self.by_name[name].dtype)}, {_shape_literal(layout.shape)}, "
                f"{_shape_literal(layout.stride)}, {format_index(self.slot_elements(name))})")

    def tensor_arg(self, a: TensorArg) -> str:
        if a.layout is None:
            return a.buffer
        lay = a.layout
        offset = format_index(lay.offset)
        if isinstance(self.by_name[a.buffer], InputBuffer):
            # a graph input may itself start inside its storage (a view); layouts
            # count from its first element, as the kernels do from its data_ptr
            offset = f"{a.buffer}.storage_offset() + {offset}"
        elif self.arena.slot(a.buffer) is not None:   # its storage starts at its slot
            offset = format_index(sympy.expand(self.slot_elements(a.buffer) + lay.offset))
        return (f"as_strided({a.buffer}, {_shape_literal(lay.shape)}, {_shape_literal(lay.stride)}, "
                f"{offset})")

    def argument(self, a) -> str:
        if isinstance(a, TensorArg):
            return self.tensor_arg(a)
        if isinstance(a, (list, tuple)) and any(isinstance(x, TensorArg) for x in a):
            inner = ", ".join(self.argument(x) for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner},)"
        return python_literal(a)

    def write(self) -> str:
        g = self.graph
        out = ["def make_call(launchers):"] + ["    " + line for line in guard_imports(g)]
        kernels = [s for s in self.schedule.steps if isinstance(s, KernelGroup)]
        for k in kernels:
            out.append(f"    {k.name} = launchers[{('triton_' + k.name)!r}]")
        out.append(f"    _device = {python_literal(g.device)}   # made once, not on every allocation")
        out.append("")
        out.append("    def call(args):")
        body = []
        if g.inputs or g.size_inputs:
            body.append(f"{', '.join(argument_names(g))}, = args")
        body.extend(size_bindings(g))   # before the list is emptied: a broken guard leaves it whole
        body.append("args.clear()   # each input lives until its last use (below), not the whole call")
        arena_steps = self.arena.steps if self.arena.slots else (None, None)
        reused = {src for sm in self.schedule.memory.steps for _, src in sm.allocate if src}
        input_reads = last_input_reads(g, self.schedule.steps)
        for k, (step, sm) in enumerate(zip(self.schedule.steps, self.schedule.memory.steps)):
            if k == arena_steps[0]:
                body.extend(self.arena_lines())
            in_place = sm.in_place()   # donors the kernel still reads: freed after it
            for name, src in sm.allocate:
                buf = self.by_name[name]
                if name in self.addressed:   # kernels take its slot's address
                    if src is not None and src not in in_place and src not in self.addressed:
                        body.append(f"del {src}  # its slot is reused")
                elif src in self.addressed:   # a tensor over the slot a kernel-only buffer had
                    body.append(f"{name} = {self.arena_tensor(name, buf.layout)}  # arena")
                elif src in in_place:   # the same elements, maybe in another shape ([B*T, C] as [B, T, C])
                    body.append(f"{name} = {self.storage_of(src, buf.layout)}  # reuse in place")
                elif src is not None and input_reads.get(src, -1) > k:   # a later step names the input
                    body.append(f"{name} = {src}  # reuse")
                elif src is not None:
                    body.append(f"{name} = {src}; del {src}  # reuse")
                elif self.arena.slot(name) is not None:
                    body.append(f"{name} = {self.arena_tensor(name, buf.layout)}  # arena")
                else:
                    body.append(f"{name} = empty_strided({_shape_literal(buf.layout.shape)}, "
                                f"{_shape_literal(buf.layout.stride)}, device=_device, dtype={buf.dtype})")
            if isinstance(step, KernelGroup):
                buffers, sizes = self.launch_args["triton_" + step.name]
                args = ", ".join([self.kernel_arg(n) for n in buffers] + list(sizes))
                body.append(f"{step.name}({args})")
            else:
                body.append(self.extern_line(step.buffer))
                body.extend(self.layout_check(step.buffer))
            dead = [n for n in sm.free_after if (n not in reused or n in in_place) and n not in self.addressed]
            dead += sm.inputs_dead_after
            if k == arena_steps[1]:
                dead += self.arena_names()
            if dead:
                body.append(f"del {', '.join(dead)}")
        outs = [self.output(o.arg) for o in g.outputs]
        if g.single_output:
            body.append(f"return {outs[0]}")
        else:
            body.append("return (" + "".join(f"{o}, " for o in outs) + ")")
        out.extend("        " + line for line in body)
        out.append("    return call")
        return "\n".join(out) + "\n"

    def storage_of(self, name: str, layout) -> str:
        """``name``'s storage as a tensor of ``layout`` (from the storage's start) when its own
        layout differs: a tensor of its own, not a view, since it may be a graph output."""
        own = self.by_name[name].layout
        if (own.shape, own.stride) == (layout.shape, layout.stride):
            return name
        if self.arena.slot(name) is not None:
            return self.arena_tensor(name, layout)
        return f"same_storage({name}, {_shape_literal(layout.shape)}, {_shape_literal(layout.stride)})"

    def kernel_arg(self, name: str) -> str:
        """Kernels index from the storage's start (the layout's offset is in their
        index expressions); a tensor argument passes its data_ptr, which points
        past its storage offset, so an extern view is passed from its storage start."""
        buf = self.by_name[name]
        if name in self.addressed:
            return arena_address(self.arena.slot(name))
        if isinstance(buf, ExternBuffer) and buf.layout.offset != 0:
            return f"as_strided({name}, (1, ), (1, ), 0)"
        return name

    def address_positions(self, kernel: str) -> list:
        """The positions of ``kernel``'s pointer arguments that the host code passes as addresses."""
        return [k for k, name in enumerate(self.launch_args[kernel][0]) if name in self.addressed]

    def layout_check(self, buf: ExternBuffer) -> list:
        """An extern op's result may be laid out otherwise than traced (its strides can
        follow its inputs', which the schedule may have realized differently): kernels
        and views of it assume the traced layout."""
        if buf.name in self.tuple_results:
            return []
        lay = buf.layout
        shape, stride, offset = _shape_literal(lay.shape), _shape_literal(lay.stride), format_index(lay.offset)
        return [f"if {buf.name}.stride() != {stride} or {buf.name}.storage_offset() != {offset}:",
                f"    {buf.name} = relayout({buf.name}, {shape}, {stride}, {offset})"]

    def callee(self, op, kwargs: dict) -> str:
        """What an extern line calls: an overload by its module-level name (``extern_callees``)."""
        if isinstance(op, torch._ops.OpOverload):
            return self.callees.callee(op, kwargs)
        return python_literal(op)

    def extern_line(self, buf: ExternBuffer) -> str:
        if buf.parent is not None:
            return f"{buf.name} = {buf.parent}[{buf.output_index}]"
        args = [self.argument(a) for a in buf.args]
        args += [f"{k}={self.argument(v)}" for k, v in buf.kwargs.items()]
        loc = f"  # {buf.location}" if buf.location else ""
        return f"{buf.name} = {self.callee(buf.op, buf.kwargs)}({', '.join(args)}){loc}"

    def output(self, arg) -> str:
        if isinstance(arg, TensorArg):
            own = self.by_name[arg.buffer].layout
            lay = arg.layout
            if lay is None or (lay.shape == own.shape and lay.stride == own.stride and lay.offset == own.offset):
                return arg.buffer
            return self.tensor_arg(arg)
        return python_literal(arg)


def arena_view(dtype) -> str:
    """The host code's name of the arena's view as ``dtype`` elements."""
    return "_arena_" + str(dtype).rsplit(".", 1)[-1]


WRAPPER_PRELUDE = '''
empty_strided = torch.empty_strided
as_strided = torch.as_strided
'''


# ``t``'s values in the layout the kernels were generated for; with an offset,
# in a storage that starts that many elements before the values, as traced.
RELAYOUT_HELPER = '''

def relayout(t, shape, stride, offset):
    out = torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device)
    if offset:
        out = torch.empty(offset + out.untyped_storage().nbytes() // t.element_size(), dtype=t.dtype,
                          device=t.device).as_strided(shape, stride, offset)
    return out.copy_(t)
'''


# An output written in place over a buffer of another shape ([B*T, C] read as [B, T, C]).
SAME_STORAGE_HELPER = '''

def same_storage(t, shape, stride):
    return t.new_empty(0).set_(t.untyped_storage(), 0, shape, stride)
'''


def generate_wrapper(schedule: Schedule, launch_args: dict, addresses: bool = False) -> tuple:
    """(the host code's text, {kernel: positions of its pointer arguments passed as addresses})."""
    writer = WrapperWriter(schedule, launch_args, addresses)
    make_call = writer.write()   # first: it collects the module-level names of the extern calls
    text = (WRAPPER_PRELUDE + RELAYOUT_HELPER + SAME_STORAGE_HELPER + CALLEES_PRELUDE + "\n"
            + "".join(line + "\n" for line in writer.callees.module_bindings()) + "\n\n" + make_call)
    return text, {kernel: writer.address_positions(kernel) for kernel in launch_args}
