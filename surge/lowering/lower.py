"""Lower an ATen FX graph into a ``LoopGraph``.

Walks the graph once. Placeholders become input buffers; each call is lowered
by its registered rule into a ``LazyTensor`` (pointwise ops and views stay
lazy, reductions make buffers); ops without a rule become extern calls to
ATen. Lazy values are realized into buffers where memory is needed.
"""
from __future__ import annotations

import operator
import re

import sympy
import torch
import torch.fx

from .. import logs
from ..errors import SurgeError
from ..observe.phases import phase_timer
from ..passes.pipeline import PassContext, run_pipeline
from ..options import CompileConfig
from ..target import Target, default_target
from . import matmul_padding, ops_index, ops_pointwise, ops_reduction, ops_scatter, ops_view  # noqa: F401  (register rules)
from .ir import (
    ComputedBuffer, ExternBuffer, ExternResult, GraphOutput, InputBuffer, Layout, LoopGraph, ScatterBuffer,
    SizeInput, TensorArg,
)
from .pipeline import LOOP_IR
from .reductions import reduction_kind
from .registry import NotLowered, lowering_for
from .size_vars import SizeVars, has_symbolic_layout, symbolic_form
from .sizes import FloorDiv, Mod, index_symbol
from .split_reduction import SPLIT_REDUCTION_MIN_ELEMENTS, split_reduction
from .tensor import LazyTensor
from .extern_meta import extern_result_meta
from .matmul_operands import MATMUL_OPS, VIEW_OPS, feeds_matmul, matmul_operand_view, realize_matmul_operand
from .values import cast, loaded_buffers, op_count

# A lazy value read by several consumers is inlined into each (recomputed)
# unless it costs more operations than this, or reads more buffers than the other
# limit; then it is computed once (and stored by the kernel that computes it).
# The buffer limit stops chains such as a residual stream from growing through
# every layer: each consumer would read all the chain's buffers again, and all of
# them would stay alive until the last one.
RECOMPUTE_OP_LIMIT = 12
RECOMPUTE_BUFFER_LIMIT = 2


class LoweringError(SurgeError):
    """The graph uses something the loop IR cannot express (with the user's file:line)."""


def node_location(node: torch.fx.Node) -> str | None:
    trace = node.meta.get("stack_trace")
    if not trace:
        return None
    found = re.findall(r'File "([^"]+)", line (\d+)', trace)
    if not found:
        return None
    path, line = found[-1]
    return f"{path}:{line}"


def meta_value(node):
    val = node.meta.get("val", node.meta.get("example_value"))
    return val


class Lowering:
    """The state of lowering one graph; lowering rules receive it as ``ctx``."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, device: torch.device, target: Target,
                 config: CompileConfig):
        self.gm = gm
        self.target = target
        self.config = config
        self.example_inputs = list(example_inputs)
        self.device = device
        self.inputs: list[InputBuffer] = []
        self.buffers: list = []
        self.constants: dict[str, torch.Tensor] = {}
        self.env: dict[torch.fx.Node, object] = {}
        self.node: torch.fx.Node | None = None
        self.single_output = False
        self.sizes = SizeVars()     # the graph's size symbols (SymInt inputs, symbolic shapes)
        self.size_inputs: list[SizeInput] = []
        self._placeholders = 0      # placeholders lowered so far (tensors and sizes)
        self._count = 0
        self._realized: dict = {}   # id(lazy value) -> (the value, its buffer's LazyTensor)
        # split reductions made so far (split_reduction.py): a value reduced twice alike (a
        # batch norm's sum, and the mean inside its variance) is reduced once
        self.split_results: dict = {}

    # -- naming and metadata -------------------------------------------------
    def new_name(self) -> str:
        name = f"buf{self._count}"
        self._count += 1
        return name

    @property
    def out_meta(self):
        return meta_value(self.node)

    def out_dtype(self, index: int | None = None) -> torch.dtype:
        val = self.out_meta
        if index is not None:
            val = val[index]
        return val.dtype

    def out_device(self) -> torch.device:
        """The real device of the node's result (meta values live on the meta device)."""
        device = self.node.meta.get("device")
        if device is not None:
            return self.same_device(torch.device(device))
        val = self.out_meta
        if isinstance(val, torch.Tensor) and val.device.type != "meta":
            return self.same_device(val.device)
        return self.device

    def same_device(self, device: torch.device) -> torch.device:
        """``device``, as the graph's own when it names it without an index (``"cuda"``)."""
        if device.index is None and device.type == self.device.type:
            return self.device
        return device

    def result_device(self, val: torch.Tensor) -> torch.device:
        """Where an extern call's result ``val`` (real, or traced on meta) really lives."""
        if val.device.type != "meta":
            return self.same_device(val.device)
        return self.out_device() if self.node is not None else self.device

    def origin(self) -> tuple:
        if self.node is None or self.node.op != "call_function":
            return ()
        return (getattr(self.node.target, "__name__", str(self.node.target)).split(".")[0],)

    # -- sizes and layouts of traced values ---------------------------------------------
    def layout_of(self, val: torch.Tensor) -> Layout:
        sizes = self.sizes
        return Layout(sizes.shape(val.shape), sizes.shape(val.stride()), sizes.expr(val.storage_offset()))

    def is_dense(self, val: torch.Tensor) -> bool:
        """Non-overlapping and dense: some permutation of a contiguous layout."""
        return _dense(self.sizes, self.layout_of(val))

    def eager_layout(self, t: LazyTensor, traced) -> Layout | None:
        """The layout eager gave a library call's operand, when it is dense: eager's
        pointwise results follow their inputs' strides (a rotary embedding of a
        transposed query stays [batch, seq, heads, dim] in memory), and a library kernel
        may read one layout faster than another (an attention kernel reads such a query
        as rows). None (contiguous) when tracing gave nothing usable."""
        if not isinstance(traced, torch.Tensor) or traced.dtype != t.dtype:
            return None
        layout = self.layout_of(traced)
        if not _dense(self.sizes, layout) or len(layout.shape) != len(t.shape) or not all(
                self.sizes.known_equal(a, b) for a, b in zip(layout.shape, t.shape)):
            return None
        return layout

    # -- making buffers --------------------------------------------------------
    def realize(self, t: LazyTensor, layout: Layout | None = None) -> LazyTensor:
        """``t`` computed into a buffer (with ``layout``, default contiguous).

        A value realized twice in one layout is one buffer: a lazy value that several
        extern calls take (HF's attention mask, given to every layer's attention) is
        computed once, not once per call, and a library call's operand that the forward
        also saves for the backward is stored once."""
        if t.view is not None and layout is None:
            return t
        key = (id(t), None if layout is None else _layout_tuple(layout))
        found = self._realized.get(key)
        if found is not None and found[0] is t:
            return found[1]
        result = self._realize(t, layout or Layout.contiguous(t.shape))
        self._realized[key] = (t, result)
        return result

    def _realize(self, t: LazyTensor, layout: Layout) -> LazyTensor:
        loop_dims = tuple(d for d, s in enumerate(t.shape) if s != 1)
        ranges = tuple(t.shape[d] for d in loop_dims)
        index = [sympy.Integer(0)] * len(t.shape)
        for k, d in enumerate(loop_dims):
            index[d] = index_symbol("i", k)
        buf = ComputedBuffer(
            self.new_name(), layout, t.dtype, self.device, ranges=ranges, value=t.load(index),
            loop_dims=loop_dims, origins=t.origins or self.origin(), location=self.location(),
        )
        self.buffers.append(buf)
        return LazyTensor.of_buffer(buf.name, layout, t.dtype, t.device)

    def copy_to_scatter_into(self, t: LazyTensor) -> LazyTensor:
        """A buffer of ``t``'s values that nothing else reads, for a scatter to write into
        (``ir.ScatterBuffer``). Laid out as the buffer that ``t`` is, when ``t`` is a whole
        dense buffer (a graph input): the schedule may then let the scatter write into
        that buffer itself (``schedule/scatter_stores.py``)."""
        layout = Layout.contiguous(t.shape)
        if t.view is not None:
            own = self.by_name[t.view[0]].layout
            if _same_layout(t.view[1], own) and own.offset == 0 and _dense(self.sizes, own):
                layout = own
        return self._realize(t, layout)

    def scatter(self, into: LazyTensor, shape, value, target: sympy.Expr, indirect: tuple) -> LazyTensor:
        """``into`` (a ``copy_to_scatter_into`` buffer) with ``value`` stored at ``target`` for
        each point of ``shape`` (``value`` and ``target`` over the loop symbols of
        ``shape``'s dims that are not 1, in order; ``indirect``: the index symbols of
        ``target`` and their values)."""
        name, layout = into.view
        loop_dims = tuple(d for d, s in enumerate(shape) if s != 1)
        buf = ScatterBuffer(
            self.new_name(), layout, into.dtype, self.device, ranges=tuple(shape[d] for d in loop_dims),
            value=value, loop_dims=loop_dims, origins=self.origin(), location=self.location(),
            into=name, target=target, indirect=tuple(indirect))
        self.buffers.append(buf)
        return LazyTensor.of_buffer(buf.name, layout, into.dtype, into.device)

    def reduction(self, t: LazyTensor, dims, keepdim: bool, reduction_type: str,
                  dtype: torch.dtype, acc_dtype: torch.dtype | None = None,
                  correction: float = 0.0, split: bool = True) -> LazyTensor:
        """Reduce ``t`` over ``dims`` into a new buffer (two, when ``split_reduction`` splits it)."""
        dims = sorted({d % max(t.ndim, 1) for d in dims}) if t.ndim else []
        if split:
            out = split_reduction(self, t, dims, keepdim, reduction_type, dtype, acc_dtype or dtype,
                                  correction, self.config.split_reduction_min_elements)
            if out is not None:
                return out
        out_shape = [sympy.Integer(1) if d in dims else s for d, s in enumerate(t.shape)]
        if not keepdim:
            out_shape = [s for d, s in enumerate(t.shape) if d not in dims]
        outer = [d for d in range(t.ndim) if d not in dims and t.shape[d] != 1]
        red = [d for d in dims if t.shape[d] != 1] or dims[:1]
        index = [sympy.Integer(0)] * t.ndim
        for k, d in enumerate(outer):
            index[d] = index_symbol("i", k)
        for k, d in enumerate(red):
            index[d] = index_symbol("r", k)
        acc_dtype = acc_dtype or dtype
        value = t.load(index) if t.ndim else t.load([])
        if not reduction_kind(reduction_type).compares_inputs:
            value = cast(value, acc_dtype)
        layout = Layout.contiguous(out_shape)
        kept = [d for d in range(t.ndim) if d not in dims]
        loop_dims = tuple(outer) if keepdim else tuple(kept.index(d) for d in outer)
        buf = ComputedBuffer(
            self.new_name(), layout, dtype, self.device,
            ranges=tuple(t.shape[d] for d in outer), value=value,
            reduction_ranges=tuple(t.shape[d] for d in red) if red else (sympy.Integer(1),),
            reduction_type=reduction_type, acc_dtype=acc_dtype, correction=correction,
            loop_dims=loop_dims, origins=_merge_origins(t.origins, self.origin()), location=self.location(),
        )
        self.buffers.append(buf)
        return LazyTensor.of_buffer(buf.name, layout, dtype, t.device)

    def extern(self, target, args, kwargs, result_meta=None) -> object:
        """Call ATen ``target`` on realized arguments.

        The result's layouts are what the op makes of the arguments as realized
        (``extern_result_meta``), not what tracing saw: a realized argument may be
        laid out otherwise than the traced one, and kernels index the result by its
        layout. An op returning several values gets one buffer per tensor element
        that the graph reads; its Python scalars (sizes, which a meta run can only
        derive from shapes) become constants, or size expressions where the sizes are
        symbolic. A rule that calls an op on arguments of
        other sizes than traced gives the result's meta tensor (``result_meta``), or its
        layout (``ExternResult``) where the sizes are symbolic.
        """
        def to_arg(a, traced):
            if isinstance(a, LazyTensor):
                found = matmul_operand_view(target, a, self.sizes)
                if found is None:
                    if target in MATMUL_OPS:
                        found = realize_matmul_operand(self, a).view
                    else:
                        found = self.realize(a, None if a.view is not None else self.eager_layout(a, traced)).view
                name, layout = found
                own = self.by_name[name].layout
                same = layout.stride == own.stride and layout.shape == own.shape and layout.offset == own.offset
                return TensorArg(name, None if same else layout)
            if isinstance(a, (list, tuple)):
                traced = traced if isinstance(traced, (list, tuple)) and len(traced) == len(a) else [None] * len(a)
                return type(a)(to_arg(x, t) for x, t in zip(a, traced))
            return a
        traced_args, traced_kwargs = self.traced_arguments(target, len(args))
        args = tuple(to_arg(a, t) for a, t in zip(args, traced_args))
        kwargs = {k: to_arg(v, traced_kwargs.get(k)) for k, v in kwargs.items()}
        loc = self.location()
        val = result_meta if result_meta is not None else extern_result_meta(
            target, args, kwargs, self.by_name, self.node, self.out_meta, self.sizes)
        if isinstance(val, (torch.Tensor, ExternResult)):
            layout, dtype, device = self.result_layout(val)
            buf = ExternBuffer(self.new_name(), layout, dtype, device,
                               op=target, args=args, kwargs=kwargs, location=loc)
            self.buffers.append(buf)
            return LazyTensor.of_buffer(buf.name, buf.layout, dtype, device)
        if isinstance(val, (list, tuple)):
            parent = ExternBuffer(self.new_name(), Layout((), ()), torch.float32, self.device,
                                  op=target, args=args, kwargs=kwargs, location=loc)
            self.buffers.append(parent)
            used = _used_elements(self.node)
            outs = []
            for k, v in enumerate(val):
                if isinstance(v, (torch.Tensor, ExternResult)):
                    if used is not None and k not in used:
                        outs.append(None)   # never read: no buffer (it may even be undefined at run time)
                        continue
                    layout, dtype, device = self.result_layout(v)
                    child = ExternBuffer(self.new_name(), layout, dtype, device,
                                         parent=parent.name, output_index=k, location=loc)
                    self.buffers.append(child)
                    outs.append(LazyTensor.of_buffer(child.name, child.layout, dtype, device))
                elif v is None or type(v) in (int, float, bool):
                    outs.append(v)
                elif _is_symbolic_int(v):   # a size it returns (flash and cuDNN attention's max_q, max_k)
                    outs.append(self.sizes.expr(v))
                else:
                    raise LoweringError(f"cannot call {target} as an extern op: element {k} of its "
                                        f"result is a {type(v).__name__}" + (f"\n  at {loc}" if loc else ""))
            return tuple(outs)
        raise LoweringError(f"cannot call {target} as an extern op: it returns {type(val).__name__}"
                            + (f"\n  at {loc}" if loc else ""))

    def result_layout(self, val) -> tuple:
        """(layout, dtype, device) of an extern result: a meta tensor, or an ``ExternResult``
        (a layout of size expressions). It lives where the op puts it (``torch.rand([])``
        on the CPU in a CUDA graph): kernels of the graph's device must not read it as one
        of theirs."""
        if isinstance(val, ExternResult):
            return val.layout, val.dtype, self.out_device()
        return self.layout_of(val), val.dtype, self.result_device(val)

    def traced_arguments(self, target, count: int) -> tuple[list, dict]:
        """The traced values of the arguments of the node being lowered, when ``target``
        is what it calls (a rule calling some other op gets Nones)."""
        node = self.node
        if node is None or node.op != "call_function" or node.target is not target or len(node.args) != count:
            return [None] * count, {}
        return torch.fx.node.map_arg((list(node.args), dict(node.kwargs)), meta_value)

    @property
    def by_name(self) -> dict:
        return {b.name: b for b in self.inputs + self.buffers}

    def location(self) -> str | None:
        return node_location(self.node) if self.node is not None else None

    # -- the walk --------------------------------------------------------------
    def run(self) -> LoopGraph:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.example_inputs):
            raise LoweringError(f"graph has {len(placeholders)} inputs, got {len(self.example_inputs)} examples")
        outputs = None
        copy_backs = []
        for node in self.gm.graph.nodes:
            self.node = node
            if node.op == "placeholder":
                self.env[node] = self.lower_input(node, self.example_inputs[self._placeholders])
                self._placeholders += 1
            elif node.op == "get_attr":
                self.env[node] = self.lower_constant(node)
            elif _is_copy_back(node):
                copy_backs.append(node)
            elif node.op == "call_function":
                self.env[node] = self.lower_call(node)
            elif node.op == "output":
                outputs = self.lower_outputs(node)
            else:
                raise LoweringError(f"unsupported FX node kind {node.op!r} ({node.format_node()})")
        self.lower_copy_backs(copy_backs)
        graph = LoopGraph(self.inputs, self.buffers, outputs, self.device, sizes=self.sizes,
                          size_inputs=self.size_inputs, target=self.target)
        graph.single_output = self.single_output
        return graph

    def lower_copy_backs(self, nodes) -> None:
        """The final copies into mutated inputs, after everything that reads them.

        Pointwise values are computed lazily, where they are realized (often at the
        graph outputs), and may read an input's old value: every new value is
        realized first, then all copies run.
        """
        input_names = {b.name for b in self.inputs}
        for node in nodes:
            self.node = node
            value = self.env[node.args[1]]
            if isinstance(value, LazyTensor):
                reads_input = value.view is not None and value.view[0] in input_names
                self.env[node.args[1]] = self.realize(value, Layout.contiguous(value.shape) if reads_input else None)
        for node in nodes:
            self.node = node
            self.env[node] = self.lower_call(node)
        self.node = None

    def lower_input(self, node, example):
        example = symbolic_form(node, example)
        if not isinstance(example, torch.Tensor):
            if _is_symbolic_int(example):   # a SymInt placeholder: its value is a size of the call
                expr = self.sizes.expr(example)
                self.sizes.set_hint(expr, self.example_inputs[self._placeholders])
                self.size_inputs.append(SizeInput(f"size{len(self.size_inputs)}", expr, self._placeholders))
                return expr
            raise LoweringError(f"non-tensor graph input {node.name}={example!r} (only tensors and "
                                "symbolic sizes are graph inputs)")
        traced = node.meta.get("val") if node.op == "placeholder" else None
        shaped = traced if has_symbolic_layout(traced) else example   # symbolic sizes, if any
        layout = Layout(self.sizes.shape(shaped.shape), self.sizes.shape(shaped.stride()))
        if shaped is not example:   # the call's sizes are the symbols' hints
            for expr, size in zip(layout.shape, example.shape):
                self.sizes.set_hint(expr, size)
        buf = InputBuffer(f"arg{len(self.inputs)}", layout, example.dtype, example.device,
                          position=self._placeholders)
        self.inputs.append(buf)
        return LazyTensor.of_buffer(buf.name, layout, example.dtype, example.device)

    def lower_constant(self, node):
        value = getattr(self.gm, node.target)
        if not isinstance(value, torch.Tensor):
            return value
        self.example_inputs.append(value)
        self.constants[f"arg{len(self.inputs)}"] = value
        out = self.lower_input(node, value)
        self.inputs[-1].position = len(self.example_inputs) - 1   # constants follow the call's arguments
        return out

    def lower_call(self, node):
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: self.env[n])
        if node.target is operator.getitem:
            return args[0][args[1]]
        if node.target in SIZE_FUNCTIONS:   # arithmetic on sizes: an expression, no code
            return SIZE_FUNCTIONS[node.target](*args)
        rule = lowering_for(node.target)
        result = None
        if rule is not None and _all_tensors_on(self.device, args, kwargs):
            try:
                result = rule(self, *args, **kwargs)
            except NotLowered as why:
                logs.log("schedule", f"extern {node.target} ({why})")
                result = None
        if result is None:
            result = self.extern(node.target, args, kwargs)
        else:
            _record_origins(result, args, kwargs, self.origin())
        if isinstance(result, LazyTensor):
            result = self.maybe_realize_shared(node, result)
        return result

    def maybe_realize_shared(self, node, t: LazyTensor) -> LazyTensor:
        if t.view is not None:
            return t
        if feeds_matmul(node) and node.target not in VIEW_OPS:
            val = meta_value(node)
            if any(user.op == "output" for user in node.users) and isinstance(val, torch.Tensor) \
                    and self.is_dense(val):
                # also a graph output: stored in the layout its meta promises, which
                # callers rely on (a backward reads a saved tensor with it)
                return self.realize(t, self.layout_of(val))
            # realized for the matmul anyway: once, so that the other users read it and a
            # transposed operand is a view BLAS reads as is, not a transposing kernel; a value
            # that reads down columns (K of q @ k^T) is stored as the transposed matrices it reads
            return realize_matmul_operand(self, t)
        if len(node.users) <= 1:
            return t
        probe = t.load([index_symbol("i", k) for k in range(t.ndim)])
        if op_count(probe) > RECOMPUTE_OP_LIMIT or len(loaded_buffers(probe)) > RECOMPUTE_BUFFER_LIMIT:
            return self.realize(t, self.eager_layout(t, meta_value(node)))
        return t

    def lower_outputs(self, node):
        results = []
        self.single_output = not isinstance(node.args[0], (list, tuple))
        # Outputs from this index on are saved for a backward, which was compiled for
        # their traced layouts: a view in another layout (a padded matmul's unpadded
        # slice) is copied into it. Outputs before it reach the caller as they are.
        traced_from = self.gm.meta.get(TRACED_LAYOUT_OUTPUTS_FROM)
        for index, item in enumerate([node.args[0]] if self.single_output else node.args[0]):
            if not isinstance(item, torch.fx.Node):
                results.append(GraphOutput(item))
                continue
            self.node = item
            value = self.env[item]
            if value is None or not isinstance(value, LazyTensor):
                results.append(GraphOutput(value))
                continue
            val = meta_value(item)
            layout = self.layout_of(val) if isinstance(val, torch.Tensor) and self.is_dense(val) else None
            if value.view is None:
                value = self.realize(value, layout)
            elif traced_from is not None and index >= traced_from and layout is not None \
                    and not _same_layout(value.view[1], layout):
                value = self.realize(value, layout)
            name, view_layout = value.view
            results.append(GraphOutput(TensorArg(name, view_layout)))
        self.node = None
        return results


# ``gm.meta`` key: the index of the first output that must come out in its traced layout.
TRACED_LAYOUT_OUTPUTS_FROM = "traced_layout_outputs_from"


def _same_layout(a: Layout, b: Layout) -> bool:
    """The same elements at the same places (strides of size-1 dims do not matter)."""
    if len(a.shape) != len(b.shape) or any(sympy.simplify(x - y) != 0 for x, y in zip(a.shape, b.shape)):
        return False
    if sympy.simplify(a.offset - b.offset) != 0:
        return False
    return all(sympy.simplify(sa - sb) == 0 for sa, sb, size in zip(a.stride, b.stride, a.shape) if size != 1)


def _is_copy_back(node) -> bool:
    """The aot layer's copy of a mutated input's final value into it (nothing reads it)."""
    return (node.op == "call_function" and node.target is torch.ops.aten.copy_.default
            and node.args[0].op in ("placeholder", "get_attr") and not node.users)


def _used_elements(node) -> set | None:
    """Indices of a multi-output node's result that the graph reads (None: all of it)."""
    used = set()
    for user in node.users:
        if user.op != "call_function" or user.target is not operator.getitem:
            return None
        if user.users:   # tracing keeps a getitem of every element, read or not
            used.add(user.args[1])
    return used


def _merge_origins(*groups) -> tuple:
    out = []
    for group in groups:
        out.extend(o for o in group if o not in out)
    return tuple(out)


def _record_origins(result, args, kwargs, op: tuple) -> None:
    """Lazy results remember the ops folded into them (their inputs' and this one)."""
    inherited = []

    def collect(a):
        if isinstance(a, LazyTensor) and a.view is None:
            inherited.append(a.origins)
        elif isinstance(a, (list, tuple)):
            for x in a:
                collect(x)
    collect(list(args) + list(kwargs.values()))
    merged = _merge_origins(*inherited, op)
    for r in (result if isinstance(result, tuple) else (result,)):
        if isinstance(r, LazyTensor) and r.view is None:
            r.origins = merged


def _layout_tuple(layout: Layout) -> tuple:
    return tuple(layout.shape), tuple(layout.stride), layout.offset


def _is_symbolic_int(value) -> bool:
    """A SymInt (or an integer node of another shape environment) rather than a number."""
    return not isinstance(value, (int, bool)) and getattr(getattr(value, "node", None), "expr", None) is not None


def _sym_size(x, dim: int):
    return x.shape[dim]


def _sym_numel(x):
    out = sympy.Integer(1)
    for s in x.shape:
        out = out * s
    return out


def _sym_stride(x, dim: int):
    if x.view is None:
        raise NotLowered("the stride of a value that has no layout yet")
    return x.view[1].stride[dim]


# Graph nodes that compute sizes (Dynamo's and make_fx's SymInt arithmetic): their
# results are expressions over the size symbols, not values of the program.
SIZE_FUNCTIONS = {
    torch.ops.aten.sym_size.int: _sym_size,
    torch.ops.aten.sym_numel.default: _sym_numel,
    torch.ops.aten.sym_stride.int: _sym_stride,
    operator.add: operator.add,
    operator.sub: operator.sub,
    operator.mul: operator.mul,
    operator.neg: operator.neg,
    operator.floordiv: FloorDiv,
    operator.mod: Mod,
}


def _dense(sizes: SizeVars, layout: Layout) -> bool:
    """Non-overlapping and dense from the start of its buffer, for every size in range."""
    return layout.offset == 0 and sizes.known_dense(layout.shape, layout.stride)


def _all_tensors_on(device, args, kwargs) -> bool:
    """Kernels read memory of the graph's device; other tensors (CPU scalars) go extern."""
    ok = True

    def check(a):
        nonlocal ok
        if isinstance(a, LazyTensor) and a.device != device:
            ok = False
        elif isinstance(a, (list, tuple)):
            for x in a:
                check(x)
    check(list(args))
    check(list(kwargs.values()))
    return ok


def graph_device(example_inputs) -> torch.device:
    """The device the graph's kernels run on: its first input on an accelerator, else the
    CPU. CPU tensors among CUDA ones (a 0-d ``torch.rand([])``, a step counter) are
    read by extern ops, never by the kernels."""
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    return next((x.device for x in tensors if x.device.type != "cpu"), torch.device("cpu"))


@phase_timer.phase("lowering")
def lower_graph(gm: torch.fx.GraphModule, example_inputs, device: torch.device | None = None, *,
                target: Target | None = None, config: CompileConfig | None = None):
    """The ``LoopGraph`` of ``gm`` after the loop IR's pipeline (``pipeline.LOOP_IR``), plus
    the constant tensors it reads as extra inputs.

    ``target``: what the code generator decides (padded matmuls, split column reductions;
    default: the device's default target). ``config``: the compile's options (the split
    threshold of reductions, ``pad_matmuls``, the debug dir of the pipeline's dumps;
    default: the defaults)."""
    if device is None:
        device = graph_device(example_inputs)
    if target is None:
        target = default_target(device.type)
    if config is None:
        config = CompileConfig(split_reduction_min_elements=SPLIT_REDUCTION_MIN_ELEMENTS)
    lowering = Lowering(gm, example_inputs, device, target, config)
    graph = run_pipeline(lowering.run(), PassContext(graph_name="loop_ir", options=config), LOOP_IR)
    return graph, lowering.constants
