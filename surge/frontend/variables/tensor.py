"""Tensors as graph values: every op on them becomes a node of the graph.

``record_op`` is the one place tensor work enters the graph: it turns symbolic
arguments into FX arguments and meta arguments, runs the op on meta tensors
for its result's metadata, and wraps the result. Tensor methods and properties
with special meaning (metadata queries answered now, data-dependent queries
that cannot be captured) are rules in the registries below.
"""
from __future__ import annotations

import operator

import torch

from ...errors import Unsupported
from ...registry import rule_registrar
from .. import meta as meta_utils
from ..graph_builder import run_on_meta
from ..size_node import hint_of, is_symbolic
from ..symbolic_meta import symbolic_meta
from .autocast import run_under_autocast
from .base import AttributeMissing, Variable, raise_in_user_code, unsupported
from .constant import ConstantVariable, is_constant_value, is_numpy_scalar
from .data_dependent_ops import bind_sizes, data_dependent_result, dynamic_output_rule
from .device_modes import with_factory_device
from . import torch_function
from .tensor_subclasses import PLAIN_TENSOR_CLASSES, as_subclass_method, subclass_getattr, subclass_setattr


class TensorVariable(Variable):
    def __init__(self, node, example: torch.Tensor, device: torch.device, cls=torch.Tensor, source=None, real=None,
                 attrs=None):
        self.node = node
        self.example = example  # a meta tensor
        self.device = device
        self.cls = cls
        self.source = source
        self.real = real  # the real tensor, for graph inputs only
        # Python attributes of a subclass instance the trace made (tensor_subclasses.py).
        self.attrs = attrs if attrs is not None else {}

    def python_type(self):
        return self.cls

    def truthy(self, tx):
        unsupported("branching on a tensor's value (data-dependent control flow)")

    def getattr(self, tx, name):
        if self.cls not in PLAIN_TENSOR_CLASSES:
            found = subclass_getattr(tx, self, name)
            if found is not None:
                return found
        rule = TENSOR_ATTRIBUTES.get(name)
        if rule is not None:
            return rule(tx, self)
        # Methods that read data fail when called (``call_tensor_method``), not when
        # loaded: a graph break then hands the whole call to CPython.
        if not hasattr(torch.Tensor, name):
            raise AttributeMissing(name)
        from .functions import TensorMethodVariable

        return TensorMethodVariable(self, name)

    def setattr(self, tx, name, value):
        subclass_setattr(tx, self, name, value)

    def call_method(self, tx, name, args, kwargs):
        if name in TENSOR_ATTRIBUTES:
            return self.getattr(tx, name).call(tx, args, kwargs)
        return call_tensor_method(tx, self, name, args, kwargs)

    def identity_key(self):
        """Tensors hash and compare as dict keys by identity: an input by its object, a
        value the graph computes by its node."""
        from .containers import IdentityKey

        return IdentityKey(self, self.real if self.real is not None else self.node)

    def iterate(self, tx):
        if self.cls not in PLAIN_TENSOR_CLASSES:
            # Tensor.__iter__ as torch writes it: dim(), then unbind(0), each through the
            # class's __torch_function__ (rows are what the override makes of unbind's).
            if self.call_method(tx, "dim", [], {}).as_constant() == 0:
                raise_in_user_code(TypeError, "iteration over a 0-d tensor")
            return self.call_method(tx, "unbind", [ConstantVariable(0)], {}).iterate(tx)
        if self.example.dim() == 0:
            unsupported("iterating over a 0-d tensor")
        return [record_op(tx, "call_function", operator.getitem, [self, ConstantVariable(i)], {})
                for i in range(self.example.shape[0])]

    def length(self, tx):
        if self.cls not in PLAIN_TENSOR_CLASSES:
            found = self.call_method(tx, "__len__", [], {})
            if not found.is_constant():
                unsupported(f"__len__ of {self.cls.__qualname__} returned {found}")
            return found.as_constant()
        if self.example.dim() == 0:
            unsupported("len() of a 0-d tensor")
        return self.example.shape[0]

    def __repr__(self):
        return f"TensorVariable({self.node}, {tuple(self.example.shape)}, {self.example.dtype})"


def call_tensor_method(tx, tensor: TensorVariable, name: str, args: list, kwargs: dict) -> Variable:
    overridden = torch_function.dispatch_method(tx, tensor, name, args, kwargs)
    if overridden is not None:
        return overridden
    if name in DATA_DEPENDENT_METHODS:
        from .scalar_reads import captures_reads, read_scalar_method, why_reads_break

        read = read_scalar_method(tx, tensor, name) if captures_reads(tx) else None
        if read is not None:
            return read
        why = why_reads_break(tx) if name in ("item", "tolist", "__int__", "__float__") else ""
        unsupported(f"Tensor.{name}() reads tensor data into Python{why}")
    rule = TENSOR_METHODS.get(name)
    if rule is not None:
        return rule(tx, tensor, args, kwargs)
    return record_op(tx, "call_method", name, [tensor, *args], kwargs)


# ---- turning symbolic arguments into FX / meta arguments -------------------------


def _unwrap(tx, value: Variable, devices: list):
    """(fx argument, meta argument) for one symbolic argument."""
    if isinstance(value, TensorVariable):
        devices.append(value.device)
        return value.node, value.example
    from .containers import DictVariable, ListVariable, SliceVariable, TupleVariable

    if isinstance(value, ConstantVariable):
        if is_numpy_scalar(value.value):  # torch takes it as the Python number it holds
            return value.value.item(), value.value.item()
        if tx.dynamic.active:  # symbolic sizes become nodes computing them (dynamic_dims.py)
            return tx.dynamic.graph_value(tx, value.value), meta_number(value.value)
        return value.value, value.value
    if isinstance(value, (TupleVariable, ListVariable)):
        pairs = [_unwrap(tx, v, devices) for v in value.items]
        kind = list if isinstance(value, ListVariable) else tuple
        return kind(p[0] for p in pairs), kind(p[1] for p in pairs)
    if isinstance(value, SliceVariable):
        parts = [_unwrap(tx, v, devices) for v in (value.start, value.stop, value.step)]
        if any(isinstance(p[0], torch.fx.Node) and not is_symbolic(p[0].meta.get("val")) for p in parts):
            unsupported("slicing with a tensor as a bound")
        return slice(*(p[0] for p in parts)), slice(*(p[1] for p in parts))
    if isinstance(value, DictVariable):
        out_fx, out_meta = {}, {}
        for k, v in value.items.items():
            out_fx[k], out_meta[k] = _unwrap(tx, v, devices)
        return out_fx, out_meta
    unsupported(f"passing {value} to a tensor operation")


def record_op(tx, kind: str, target, args: list, kwargs: dict) -> Variable:
    """Add one op to the graph and return its symbolic result; an argument whose class
    overrides ``__torch_function__`` gets the op handed to that override instead."""
    if kind == "call_function":  # torch's DeviceContext mode runs before any subclass's override
        kwargs = with_factory_device(tx, target, kwargs)
    overridden = torch_function.dispatch(tx, kind, target, args, kwargs)
    if overridden is not None:
        return overridden
    return record_plain_op(tx, kind, target, args, kwargs)


def record_plain_op(tx, kind: str, target, args: list, kwargs: dict) -> Variable:
    """Add one op to the graph as it is (no ``__torch_function__`` dispatch)."""
    from ..interpreter.handlers_around import value_checked_op_in_try

    if value_checked_op_in_try(tx, target, args):
        error = Unsupported(f"{getattr(target, '__name__', target)} may raise on its inputs' values inside a "
                            "try that could catch it: CPython runs it")
        error.eager_callee = True  # a callee run at the break runs as written, not captured alone
        raise error
    devices: list = []
    fx_args, meta_args = [], []
    for a in args:
        f, m = _unwrap(tx, a, devices)
        fx_args.append(f)
        meta_args.append(m)
    fx_kwargs, meta_kwargs = {}, {}
    for k, v in kwargs.items():
        fx_kwargs[k], meta_kwargs[k] = _unwrap(tx, v, devices)
    meta_args, meta_kwargs, explicit_device = meta_utils.strip_devices(
        target, tuple(meta_args), meta_kwargs, kind == "call_method"
    )
    data_dependent = dynamic_output_rule(kind, target, meta_args, meta_kwargs)
    if data_dependent is not None:
        result = data_dependent_result(tx, data_dependent, lambda build: _symbolic(tx, build))
    elif tx.dynamic.symbolic_meta_needed:
        result = _cached_symbolic_run(tx, kind, target, meta_args, meta_kwargs, devices)
    else:
        result = _run(tx, kind, target, meta_args, meta_kwargs, devices)
    if not devices and not isinstance(result, (torch.Tensor, tuple, list)) and is_constant_value(result):
        # No tensor went in, so the result is a plain function of Python values.
        return ConstantVariable(result)
    device = meta_utils.result_device(explicit_device, devices)
    node = tx.graph.create_node(kind, target, tuple(fx_args), fx_kwargs, tx.stack_trace())
    if result is None and target in RESULTLESS_OPS:
        return ConstantVariable(None)
    wrapped = wrap_result(tx, node, result, device)
    if data_dependent is not None:
        bind_sizes(tx, wrapped)
    if isinstance(wrapped, TensorVariable) and args and isinstance(args[0], TensorVariable) \
            and result is meta_args[0] and args[0].cls is not torch.Tensor:
        # An in-place method returns its tensor itself: the same object (of its class, with
        # its attributes); the graph keeps the op, later reads see the new value.
        return args[0]
    return wrapped


def _symbolic(tx, run):
    """``run()`` for a capture with symbols: torch's Python meta kernels, and what they decide
    on data-dependent sizes taken size-obliviously (shape_env.py)."""
    with symbolic_meta(), tx.dynamic.env.size_oblivious():
        return run()


def _cached_symbolic_run(tx, kind, target, meta_args, meta_kwargs, devices):
    """``_run`` over symbolic sizes, through the capture's meta cache (meta_cache.py). Not
    under autocast, whose blocks decide dtypes the key does not hold; the grad mode is in
    the key (a result's ``requires_grad`` follows it)."""
    cache = tx.dynamic.meta_cache
    key = None if tx.autocast_blocks else cache.key((kind, target, torch.is_grad_enabled()), meta_args, meta_kwargs)
    result = cache.lookup(key, meta_args, meta_kwargs)
    if result is None:
        result = _symbolic(tx, lambda: _run(tx, kind, target, meta_args, meta_kwargs, devices))
        cache.remember(key, meta_args, meta_kwargs, result)
    return result


def meta_number(value):
    """A symbolic float runs meta kernels as its hint (no meta result depends on a float's
    value); symbolic ints stay symbolic (they may be sizes)."""
    if isinstance(value, torch.SymFloat):
        hint = hint_of(value)
        return 1.0 if hint is None else hint  # a value read from a tensor: any float will do
    if isinstance(value, torch.SymBool):
        return value.node.guard_bool()
    if isinstance(value, (tuple, list)) and any(isinstance(v, torch.SymFloat) for v in value):
        return type(value)(meta_number(v) for v in value)
    return value


def _run(tx, kind, target, meta_args, meta_kwargs, devices):
    if tx.autocast_blocks:
        return run_under_autocast(tx.autocast_blocks, lambda a, k: run_on_meta(kind, target, a, k),
                                  meta_args, meta_kwargs, devices)
    return run_on_meta(kind, target, meta_args, meta_kwargs)


# Ops run for their effect on an argument; they return None.
RESULTLESS_OPS = {operator.setitem, torch._C._set_grad_enabled}


def wrap_result(tx, node, result, device) -> Variable:
    from .containers import ListVariable, TupleVariable

    if isinstance(result, torch.Tensor):
        node.meta["val"] = result
        node.meta["device"] = device
        return TensorVariable(node, result, device)
    if isinstance(result, (tuple, list)) and any(isinstance(r, torch.Tensor) for r in result):
        node.meta["val"] = result
        items = []
        for i, r in enumerate(result):
            if isinstance(r, torch.Tensor):
                item = tx.graph.create_node("call_function", operator.getitem, (node, i), {}, tx.stack_trace())
                item.meta["val"] = r
                item.meta["device"] = device
                items.append(TensorVariable(item, r, device))
            elif is_constant_value(r):
                items.append(ConstantVariable(r))
            else:
                unsupported(f"an op returned a {type(r).__name__} inside its result")
        if isinstance(result, list):
            return ListVariable(items)
        cls = type(result)
        return TupleVariable(items, cls=None if cls is tuple else cls)
    tx.graph.graph.erase_node(node)
    unsupported(f"{node.target} returned a non-tensor value ({type(result).__name__}) that depends on tensor data")


# ---- tensor attributes and methods with their own rules ---------------------------

TENSOR_ATTRIBUTES: dict = {}
TENSOR_METHODS: dict = {}

# Methods that move tensor data into Python: not capturable in a graph.
DATA_DEPENDENT_METHODS = {
    "item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__complex__",
    "data_ptr", "backward", "register_hook", "retain_grad", "untyped_storage", "storage",
    "__array__", "nonzero_static", "__format__", "__repr__", "__str__",
}


tensor_attribute = rule_registrar(TENSOR_ATTRIBUTES)
tensor_method = rule_registrar(TENSOR_METHODS)


def _const(value):
    return ConstantVariable(value)


@tensor_attribute("shape")
def _shape(tx, t):
    return _const(t.example.shape)


@tensor_attribute("__class__")
def _class(tx, t):
    from .objects import ClassVariable

    return ClassVariable(t.cls)


@tensor_attribute("dtype")
def _dtype(tx, t):
    return _const(t.example.dtype)


@tensor_attribute("device")
def _device(tx, t):
    return _const(t.device)


@tensor_attribute("ndim")
def _ndim(tx, t):
    return _const(t.example.dim())


@tensor_attribute("is_cuda")
def _is_cuda(tx, t):
    return _const(t.device.type == "cuda")


@tensor_attribute("is_cpu")
def _is_cpu(tx, t):
    return _const(t.device.type == "cpu")


def _make_meta_attr(name):
    return lambda tx, t: _const(getattr(t.example, name))


def _guarded_autograd_fact(tx, t, read, condition: str, text: str) -> bool:
    """A fact about an input's autograd history (not part of its tensor guard): read and guard it.
    ``condition`` is the same read as generated code over ``{v}``."""
    if t.real is None:
        return read(t.example)
    _refuse_overriding_input(t, text)
    value = bool(read(t.real))
    tx.guards.add(t.source, f"({condition}) is {value}", f"{t.source.name()}{text} is {value}")
    return value


def _refuse_overriding_input(t, what: str) -> None:
    # Reading it from the real object would run the class's __torch_function__ at capture
    # time and in the guards; the plain alias the graph sees has its own autograd facts.
    if torch_function.overrides_torch_function(t.cls):
        unsupported(f"reading {what.strip(' .')} of an input of tensor subclass {t.cls.__qualname__} "
                    "(it overrides __torch_function__)")


@tensor_attribute("grad_fn")
def _grad_fn(tx, t):
    if _guarded_autograd_fact(tx, t, lambda x: x.grad_fn is None, "{v}.grad_fn is None", ".grad_fn is None"):
        return _const(None)
    unsupported("reading .grad_fn (autograd graph objects) in compiled code")


@tensor_attribute("is_leaf")
def _is_leaf(tx, t):
    return _const(_guarded_autograd_fact(tx, t, lambda x: x.is_leaf, "{v}.is_leaf", ".is_leaf"))


for _n in ("requires_grad", "layout", "itemsize", "nbytes", "is_sparse", "is_quantized", "is_nested"):
    TENSOR_ATTRIBUTES[_n] = _make_meta_attr(_n)


@tensor_attribute("T")
def _transpose_all(tx, t):
    if t.example.dim() < 2:
        return t  # .T of a 0-d or 1-d tensor is the tensor itself
    if t.example.dim() == 2:
        return record_op(tx, "call_method", "t", [t], {})
    dims = tuple(reversed(range(t.example.dim())))
    return record_op(tx, "call_method", "permute", [t, _const(dims)], {})


@tensor_attribute("mT")
def _matrix_transpose(tx, t):
    return record_op(tx, "call_method", "transpose", [t, _const(-2), _const(-1)], {})


TENSOR_ATTRIBUTES["H"] = lambda tx, t: record_op(tx, "call_method", "adjoint", [t], {})
TENSOR_ATTRIBUTES["mH"] = lambda tx, t: record_op(tx, "call_method", "adjoint", [t], {})
TENSOR_ATTRIBUTES["real"] = lambda tx, t: record_op(tx, "call_function", torch.real, [t], {})
TENSOR_ATTRIBUTES["imag"] = lambda tx, t: record_op(tx, "call_function", torch.imag, [t], {})


@tensor_attribute("data")
def _data(tx, t):
    return record_op(tx, "call_method", "detach", [t], {})


@tensor_attribute("grad")
def _grad(tx, t):
    if t.source is None or t.real is None:
        unsupported("reading .grad of a tensor computed inside the compiled code")
    _refuse_overriding_input(t, ".grad")
    from ..sources import AttrSource

    return tx.wrap(t.real.grad, AttrSource(t.source, "grad"))


def _constant_args(args, kwargs):
    return [a.as_constant() for a in args], {k: v.as_constant() for k, v in kwargs.items()}


def _make_metadata_method(name):
    def rule(tx, t, args, kwargs):
        a, k = _constant_args(args, kwargs)
        return _const(getattr(t.example, name)(*a, **k))
    return rule


for _n in ("size", "dim", "ndimension", "numel", "nelement", "stride", "is_contiguous", "element_size",
           "is_floating_point", "is_complex", "is_signed", "is_inference", "__len__"):
    TENSOR_METHODS[_n] = _make_metadata_method(_n)


@tensor_method("get_device")
def _get_device(tx, t, args, kwargs):
    return _const(t.device.index if t.device.type != "cpu" else -1)


@tensor_method("type")
def _type_method(tx, t, args, kwargs):
    if not args and not kwargs:
        prefix = "torch." if t.device.type == "cpu" else f"torch.{t.device.type}."
        return _const(prefix + {torch.float32: "FloatTensor", torch.float64: "DoubleTensor",
                                torch.float16: "HalfTensor", torch.bfloat16: "BFloat16Tensor",
                                torch.int64: "LongTensor", torch.int32: "IntTensor",
                                torch.bool: "BoolTensor"}.get(t.example.dtype, "Tensor"))
    return record_op(tx, "call_method", "type", [t, *args], kwargs)


@tensor_method("as_subclass")
def _as_subclass(tx, t, args, kwargs):
    return as_subclass_method(tx, t, args, kwargs)


# torch.Tensor.__getitem__ / __setitem__ called as functions (what an override receives).
TENSOR_METHODS["__getitem__"] = lambda tx, t, args, kwargs: record_op(
    tx, "call_function", operator.getitem, [t, *args], {})
TENSOR_METHODS["__setitem__"] = lambda tx, t, args, kwargs: record_op(
    tx, "call_function", operator.setitem, [t, *args], {})
