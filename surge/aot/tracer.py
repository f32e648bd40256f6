"""Tracing to ATen: tracer tensors record every ATen op into an FX graph.

A ``TracerTensor`` is a ``__torch_dispatch__`` wrapper subclass. Its sizes,
strides, dtype and *real* device are those of the tensor it stands for; its data
is a meta tensor, so no real compute happens while tracing. ``TracerMode`` (a
``TorchDispatchMode``) catches ops with no tensor argument (factory functions).

``AtenTracer.dispatch`` is where every ATen op lands. In order, it
1. refuses data-dependent ops with a clear error,
2. functionalizes mutations (in-place and ``out=`` forms, functionalize.py),
3. decomposes ops outside the core set (decompositions.py),
4. records views as aliases of their base, and
5. records everything else as one functional node, whose meta is computed by
   running the op on meta tensors.

Every node gets ``meta["val"]`` (a meta tensor, a tuple of them, or a Python
scalar), ``meta["tensor_meta"]`` (``TensorMeta``: shape, stride, dtype, real
device) and the torch-level node it came from (``meta["stack_trace"]``,
``meta["source_node"]``).
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from ..errors import Unsupported
from . import functionalize as fz
from .decompositions import decomposition_for, packet_name, surge_decomposition
from .device_layouts import device_result
from .foreach import decompose_foreach, is_foreach
from ..frontend.meta_cache import MetaCache
from .prims import aten_body_for_prim
from .data_dependent_sizes import data_dependent_rule, trace_data_dependent, trace_scalar_read
from .symbolic_inputs import SymbolNodes, meta_scalar

aten = torch.ops.aten
_CPU = torch.device("cpu")


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    """Tensor metadata of a node, with the real device (``meta["val"]`` is on meta)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    storage_offset: int = 0

    @staticmethod
    def of(meta: torch.Tensor, device: torch.device) -> "TensorMeta":
        return TensorMeta(tuple(meta.shape), tuple(meta.stride()), meta.dtype, device,
                          meta.storage_offset())


# Ops whose result depends on tensor data: a static graph cannot contain them.
_DATA_DEPENDENT = {
    "_local_scalar_dense": "reads a tensor's value into Python (.item(), int(t), if t: ...)",
    "is_nonzero": "reads a tensor's value into Python (bool(t))",
    "equal": "returns a Python bool computed from tensor data",
    "nonzero": "its output size depends on tensor data",
    "masked_select": "its output size depends on tensor data",
    "_unique2": "its output size depends on tensor data",
    "unique_dim": "its output size depends on tensor data",
    "unique_consecutive": "its output size depends on tensor data",
    "repeat_interleave": "its output size depends on tensor data",
    "allclose": "returns a Python bool computed from tensor data",
}


def meta_like(t: torch.Tensor, *, contiguous: bool = False) -> torch.Tensor:
    """A meta tensor with ``t``'s layout, made outside any active tracer mode."""
    with _disable_current_modes():
        if contiguous:
            return torch.empty(tuple(t.shape), dtype=t.dtype, device="meta")
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")


class TracerTensor(torch.Tensor):
    """Stands for one tensor of the traced program; see the module docstring."""

    _tracer: "AtenTracer"
    _alias: fz.AliasState

    @staticmethod
    def __new__(cls, tracer, meta: torch.Tensor, device, alias: fz.AliasState, requires_grad=False):
        r = torch.Tensor._make_wrapper_subclass(
            cls, meta.shape, strides=meta.stride(), storage_offset=meta.storage_offset(),
            dtype=meta.dtype, device=device, requires_grad=requires_grad,
        )
        r._tracer = tracer
        r._alias = alias
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        tracer = next(a._tracer for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, TracerTensor))
        return tracer.dispatch(func, args, kwargs or {})

    def __repr__(self) -> str:
        return f"TracerTensor({tuple(self.shape)}, {self.dtype}, {self.device}, node={self._alias.node.name})"


class TracerMode(TorchDispatchMode):
    """Routes every op (factories included) to the tracer while tracing."""

    def __init__(self, tracer: "AtenTracer"):
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.tracer.dispatch(func, args, kwargs or {})


class AtenTracer:
    """Records ATen ops on tracer tensors into ``self.graph``."""

    def __init__(self, *, decompose: bool = True):
        self.graph = torch.fx.Graph()
        self.decompose = decompose
        self.mode = TracerMode(self)
        self.constants: dict[str, torch.Tensor] = {}
        self._constant_by_id: dict[int, TracerTensor] = {}
        # (node, real value) of every graph input, lifted state included.
        self.inputs: list[tuple[torch.fx.Node, Any]] = []
        self.input_storages: dict[int, fz.Storage] = {}
        # Meta copied onto every node recorded while one torch-level node runs.
        self.provenance: dict[str, Any] = {}
        self._decomposing: set = set()
        # Symbol placeholders of a graph with symbolic sizes (symbolic_inputs.py).
        self.symbols = SymbolNodes(self.graph)
        # The shape environment of a graph with data-dependent sizes (data_dependent_sizes.py).
        self.data_dependent_env = None
        # Meta results over symbolic sizes, by argument layouts (meta_cache.py)
        self.meta_cache = MetaCache()

    # ------------------------------------------------------------ graph inputs
    def add_input(self, name: str, value, *, requires_grad: bool = False, as_attr: bool = False,
                  symbolic=None):
        """A placeholder (or, with ``as_attr``, a get_attr of live state) for ``value``;
        ``symbolic`` is its symbolic meta value (a SymInt, a meta tensor with symbolic sizes)."""
        index = len(self.inputs)
        node = self.graph.get_attr(name) if as_attr else self.graph.placeholder(name)
        self.inputs.append((node, value))
        if not isinstance(value, torch.Tensor):
            if symbolic is not None:
                node.meta["val"] = symbolic
                self.symbols.add_input(node, symbolic)
                return symbolic
            node.meta["val"] = value
            return value
        if value.layout != torch.strided:
            raise Unsupported(f"input {name} is a {value.layout} tensor; surge traces strided tensors only")
        meta = meta_like(value) if symbolic is None else symbolic
        self._set_meta(node, meta, value.device)
        storage = fz.Storage(node, meta, value.device, input_index=index)
        self.input_storages[index] = storage
        return self._wrap(meta, value.device, storage, (), node, requires_grad)

    def lift_constant(self, value: torch.Tensor) -> TracerTensor:
        """A real tensor met while tracing becomes a get_attr constant of the graph."""
        known = self._constant_by_id.get(id(value))
        if known is not None:
            return known
        name = f"_tensor_constant{len(self.constants)}"
        self.constants[name] = value
        node = self.graph.get_attr(name)
        meta = meta_like(value)
        self._set_meta(node, meta, value.device)
        node.meta["constant"] = True
        storage = fz.Storage(node, meta, value.device, constant=True)
        t = self._wrap(meta, value.device, storage, (), node)
        self._constant_by_id[id(value)] = t
        return t

    # ------------------------------------------------------------ tensor state
    def _wrap(self, meta, device, storage, chain, node, requires_grad=False) -> TracerTensor:
        alias = fz.AliasState(storage, tuple(chain), node, storage.version)
        t = TracerTensor(self, meta, device, alias, requires_grad=requires_grad)
        if not chain and storage.owner is None:
            storage.owner = t
        return t

    def fresh_tensor(self, node, meta, device) -> TracerTensor:
        return self._wrap(meta, device, fz.Storage(node, meta, device), (), node)

    def current_node(self, t: TracerTensor) -> torch.fx.Node:
        """The node holding ``t``'s value now, replaying its views after a mutation."""
        state = t._alias
        if state.version != state.storage.version:
            storage = state.storage
            value = self.fresh_tensor(storage.base_node, storage.base_meta, storage.device)
            for step in state.chain:
                value = step.apply(value)
            state.node = value._alias.node
            state.version = storage.version
        return state.node

    def node_meta(self, t: TracerTensor) -> torch.Tensor:
        return self.current_node(t).meta["val"]

    def _set_meta(self, node, val, device) -> None:
        node.meta["val"] = val
        if isinstance(val, torch.Tensor):
            node.meta["tensor_meta"] = TensorMeta.of(val, device)
        elif isinstance(val, (tuple, list)):
            node.meta["tensor_meta"] = tuple(
                TensorMeta.of(v, device) if isinstance(v, torch.Tensor) else None for v in val)
        node.meta["device"] = device
        node.meta.update(self.provenance)

    # ------------------------------------------------------------ dispatch
    def dispatch(self, func, args, kwargs):
        if not isinstance(func, torch._ops.OpOverload):
            raise Unsupported(f"surge cannot trace {func} (not an ATen op overload)")
        name = packet_name(func)
        if self.data_dependent_env is not None and (name in _DATA_DEPENDENT or func is aten.index.Tensor):
            traced = self._data_dependent(func, args, kwargs)
            if traced is not None:
                return traced
        if name in _DATA_DEPENDENT:
            raise Unsupported(f"aten.{name}: {_DATA_DEPENDENT[name]}; a static graph cannot hold it")
        if is_foreach(func) and not func._overloadname.endswith("out"):
            with self.mode:  # one per-tensor op per element, each functionalized on its own
                return decompose_foreach(func, args, kwargs)
        if fz.mutated_arguments(func):
            return self._mutation(func, args, kwargs)
        body = None
        if func not in self._decomposing:
            body = surge_decomposition(func) or (decomposition_for(func) if self.decompose else None)
        if body is None and func.namespace == "prims":
            body = aten_body_for_prim(func)
        if body is None and func not in self._decomposing and _has_implicit_decomposition(func):
            body = func.decompose
        if body is not None:
            # An op met again inside its own decomposition is recorded whole,
            # which breaks cycles such as fill -> full_like -> fill.
            self._decomposing.add(func)
            try:
                with self.mode:
                    out = body(*args, **kwargs)
            finally:
                self._decomposing.discard(func)
            if out is not NotImplemented:
                return out
        if fz.is_view_op(func):
            return self._view(func, args, kwargs)
        return self.record(func, args, kwargs)

    def _mutation(self, func, args, kwargs):
        if packet_name(func) in fz.METADATA_MUTATIONS:
            return self._metadata_mutation(func, args, kwargs)
        args, kwargs = _with_defaults(func, args, kwargs)
        written = fz.mutated_arguments(func)
        schema = func._schema.arguments
        schema_names = [a.name for a in schema]
        bound = dict(zip(schema_names, args))
        bound.update(kwargs)
        targets = [bound[n] for n in written]
        for t in targets:
            self._check_writable(func, t)
        in_place = written == [schema_names[0]]
        out_form = all(a.kwarg_only for a in schema if a.name in written)
        functional = fz.functional_variant(func) if in_place or out_form else None
        if functional is None:
            # Ops that update some arguments besides computing a result
            # (batch norm's running stats) need a decomposition.
            body = decomposition_for(func)
            if body is None:
                raise Unsupported(f"{func} mutates its arguments and surge has no functional form for it")
            with self.mode:
                return body(*args, **kwargs)
        if in_place:
            result = self.dispatch(functional, args, kwargs)
            fz.commit_mutation(self, args[0], result)
            return args[0]
        # out= form: compute functionally, then write each result into its out tensor.
        fkwargs = {k: v for k, v in kwargs.items() if k not in written}
        fargs = [a for n, a in zip(schema_names, args) if n not in written]
        result = self.dispatch(functional, fargs, fkwargs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        for target, value in zip(targets, results):
            if tuple(target.shape) != tuple(value.shape):
                raise Unsupported(f"{func}: the out= tensor has shape {tuple(target.shape)} but the "
                                  f"result has shape {tuple(value.shape)}; surge does not resize out= tensors")
            fz.commit_mutation(self, target, value)
        return targets[0] if len(targets) == 1 else tuple(targets)

    def _metadata_mutation(self, func, args, kwargs):
        """``x.squeeze_()``, ``x.t_()``...: x becomes the view, for tensors made in the graph."""
        target = args[0]
        if packet_name(func) == "detach_":
            return target  # autograd, above the tracer, already detached it
        view_op = fz.metadata_mutation_view(func)
        if view_op is None or not isinstance(target, TracerTensor):
            raise Unsupported(f"{func} changes a tensor's sizes or strides in place; use the out-of-place form")
        storage = target._alias.storage
        if not target._alias.chain and (storage.input_index is not None or storage.constant):
            # The caller holds this very tensor and would see its new sizes.
            raise Unsupported(f"{func} changes the sizes or strides of a graph input in place")
        view = self.dispatch(view_op, args, kwargs)
        with torch._C._DisableTorchDispatch():
            aten.as_strided_.default(target, list(view.shape), list(view.stride()), view.storage_offset())
        target._alias = view._alias
        return target

    @staticmethod
    def _check_writable(func, target) -> None:
        if not isinstance(target, TracerTensor) or target._alias.storage.constant:
            raise Unsupported(f"{func} writes into a tensor the graph captured as a constant "
                              "(not a graph input); pass it as an input instead")

    def _view(self, func, args, kwargs):
        source = args[0]
        if not isinstance(source, TracerTensor):
            source = self.lift_constant(source)
            args = (source,) + tuple(args[1:])
        storage = source._alias.storage
        chain = source._alias.chain
        if packet_name(func) in fz.IDENTITY_VIEWS:
            node = self.current_node(source)
            meta = func(node.meta["val"], *args[1:], **kwargs)
            return self._wrap(meta, source.device, storage, chain + (fz.ViewStep(func, tuple(args[1:]), kwargs),), node)
        out = self.record(func, args, kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for i, t in enumerate(outs):
            step = fz.ViewStep(func, tuple(args[1:]), dict(kwargs), i if isinstance(out, (tuple, list)) else None)
            t._alias = fz.AliasState(storage, chain + (step,), t._alias.node, storage.version)
        return out

    def _data_dependent(self, func, args, kwargs):
        """An op with a data-dependent output size, in a graph the frontend captured with
        such sizes (data_dependent_sizes.py); None when it is not one."""
        flat, spec = pytree.tree_flatten((args, kwargs))
        nodes = [self.current_node(a) if isinstance(a, TracerTensor) else a for a in flat]
        metas = [n.meta["val"] if isinstance(a, TracerTensor) else a for a, n in zip(flat, nodes)]
        meta_args, meta_kwargs = pytree.tree_unflatten(metas, spec)
        device = next(a.device for a in flat if isinstance(a, TracerTensor))
        why = f"{func} ({self.provenance.get('source_node', '')})"
        if func is aten._local_scalar_dense.default:
            return trace_scalar_read(self, self.data_dependent_env, nodes[0], metas[0], device, why)
        rule = data_dependent_rule(func, meta_args, meta_kwargs)
        if rule is None:
            return None
        node_args, node_kwargs = pytree.tree_unflatten(nodes, spec)
        return trace_data_dependent(self, self.data_dependent_env, func, rule, node_args, node_kwargs, device, why)

    def record(self, func, args, kwargs):
        """Record ``func`` as one node; returns tracer tensors for its outputs."""
        flat, spec = pytree.tree_flatten((args, kwargs))
        node_flat, meta_flat, devices = [], [], []
        for a in flat:
            if isinstance(a, torch.Tensor) and not isinstance(a, TracerTensor):
                a = self.lift_constant(a)
            if isinstance(a, TracerTensor):
                node = self.current_node(a)
                node_flat.append(node)
                meta_flat.append(node.meta["val"])
                devices.append((a.dim() == 0, a.device))
            else:
                node_flat.append(self.symbols.value(a))
                meta_flat.append(meta_scalar(a))
        node_args, node_kwargs = pytree.tree_unflatten(node_flat, spec)
        meta_args, meta_kwargs = pytree.tree_unflatten(meta_flat, spec)
        device = _output_device(func, kwargs, devices)
        if any(a.name == "device" for a in func._schema.arguments):
            meta_kwargs = dict(meta_kwargs, device="meta")
        # symbolic sizes only: static meta kernels are C++ and cheaper than the key
        key = self.meta_cache.key(func, meta_args, meta_kwargs) if self.symbols.active else None
        meta_out = self.meta_cache.lookup(key, meta_args, meta_kwargs)
        try:
            if meta_out is None:
                meta_out = func(*meta_args, **meta_kwargs)
                self.meta_cache.remember(key, meta_args, meta_kwargs, meta_out)
        except NotImplementedError as e:
            raise Unsupported(f"{func} has no meta kernel, so surge cannot trace it ({e})") from None
        except Exception as e:  # noqa: BLE001
            # Either the program is wrong (then eager, run by the fallback, raises
            # the user's own error) or the op reads tensor data (a 0-dim tensor
            # passed as a Scalar, a data-dependent size).
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise Unsupported(f"{func} cannot be traced on meta tensors: {first}") from None
        meta_out = device_result(func, meta_args, meta_kwargs, meta_out, device)
        node = self.graph.call_function(func, tuple(node_args), node_kwargs)
        self._set_meta(node, meta_out, device)
        return self._wrap_outputs(node, meta_out, device)

    def _wrap_outputs(self, node, meta_out, device):
        if isinstance(meta_out, torch.Tensor):
            return self._wrap(meta_out, device, fz.Storage(node, meta_out, device), (), node)
        if isinstance(meta_out, (tuple, list)):
            outs = []
            for i, m in enumerate(meta_out):
                if isinstance(m, torch.Tensor):
                    item = self.graph.call_function(operator.getitem, (node, i))
                    self._set_meta(item, m, device)
                    outs.append(self._wrap(m, device, fz.Storage(item, m, device), (), item))
                else:
                    outs.append(m)
            return type(meta_out)(outs) if isinstance(meta_out, tuple) else outs
        return meta_out


def _with_defaults(func, args, kwargs):
    """Fill in omitted arguments from the schema, so a functional twin gets them all."""
    args = tuple(args)
    kwargs = dict(kwargs)
    for i, a in enumerate(func._schema.arguments):
        if i >= len(args) and a.name not in kwargs and a.has_default_value():
            if a.kwarg_only or i > len(args):
                kwargs[a.name] = a.default_value
            else:
                args = args + (a.default_value,)
    return args, kwargs


def _has_implicit_decomposition(func) -> bool:
    # Composite ops normally decompose above the tracer; inside a decomposition's
    # body (autograd excluded) they reach it whole, and are broken up here.
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")


def _output_device(func, kwargs, devices) -> torch.device:
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    # A 0-dim CPU tensor mixes with tensors on any device; the others decide.
    for is_scalar, device in devices:
        if not is_scalar:
            return device
    if devices:
        return devices[0][1]
    # An ATen factory without a device makes a CPU tensor: torch's default-device mode
    # (``torch.set_default_device``) gives devices to torch's Python functions only.
    return _CPU
