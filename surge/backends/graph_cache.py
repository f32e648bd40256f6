"""The compiled-graph cache on disk: a torch-level graph in, its compiled result out.

The cpp and triton backends compile a torch-level FX graph in four layers (aot,
lowering, schedule, codegen) before the kernels' own disk caches come into play.
This cache stores what those layers produced for one graph and one variant
(inference or training, which inputs require grad, autocast): the runtime
metadata of the aot layer (how outputs are rebuilt, which inputs are mutated,
what the backward returns) and, for each ATen graph, the backend's artifact (the
generated host module, its constants, the kernel library's source). A hit builds
the callable from those without tracing, lowering or generating anything.

A wrong hit is the worst bug surge can have, so the key is an exact hash of all
the compiled result depends on: the graph's code and, per node, its op, target
and arguments (tensors in arguments by their bytes); every input's shape,
stride, offset, dtype, device and requires_grad (parameters included); the
variant, grad mode, default dtype and matmul precision; the options that
change the compile; the backend's knobs (compiler version and CPU, or GPU
target); and the versions of surge's sources, torch and triton. A graph with
something the key cannot describe exactly (a locally defined function, a
submodule call, an object of unknown type in an argument) is not cached.

Entries are pickles named ``<cache_dir>/graph_cache/<key>.pkl``, written and
checked through ``cache_store`` (atomic, so racing processes see a whole entry or
none; a damaged entry is never unpickled). An entry that is damaged, cannot be
read, has another format or names another key is ignored and overwritten by the
recompile.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import pickle
import sys
import types
import warnings
from typing import Any, Callable

import torch

from .. import cache_store, fallbacks, logs
from ..counters import counters
from ..runtime.code_cache import triton_version

FORMAT = 2   # 2: one artifact format for every target (Executable.artifact)
# surge's folders whose sources shape a compiled graph.
_SOURCE_DIRS = ("aot", "passes", "lowering", "schedule", "codegen", "runtime", "backends")


class Uncacheable(Exception):
    """The graph holds something the key cannot describe exactly."""


@functools.lru_cache(maxsize=1)
def versions_fingerprint() -> str:
    """surge's compiler sources, torch's and triton's versions (triton is not imported)."""
    return cache_store.sources_fingerprint(_SOURCE_DIRS, f"{torch.__version__} {triton_version()} {sys.version}")


# ---------------------------------------------------------------- the key

def _describe_tensor(t: torch.Tensor, with_data: bool) -> str:
    meta = (f"T({tuple(t.shape)},{tuple(t.stride())},{t.storage_offset()},{t.dtype},{t.device},"
            f"{t.requires_grad},{t.layout})")
    if not with_data:
        return meta
    if t.device.type == "meta" or t.is_sparse:
        raise Uncacheable(f"a {t.device.type} tensor in a graph argument")
    # A clone owns a storage of exactly its bytes (no numpy needed to read them).
    data = t.detach().to("cpu").clone(memory_format=torch.contiguous_format)
    return meta + hashlib.sha256(bytes(data.untyped_storage()) if data.numel() else b"").hexdigest()


def _describe_callable(fn) -> str:
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"op:{fn}"
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not isinstance(qualname, str) or "<" in qualname:
        raise Uncacheable(f"a function without a stable name ({qualname!r})")
    if isinstance(fn, types.BuiltinFunctionType):
        bound_to = getattr(fn, "__self__", None)
        # a builtin bound to an object (``some_list.append``) depends on that object
        if bound_to is None or isinstance(bound_to, (types.ModuleType, type)):
            return f"fn:{module}.{qualname}"
        raise Uncacheable(f"a method bound to a {type(bound_to).__name__}")
    if isinstance(fn, (types.FunctionType, types.MethodDescriptorType, types.WrapperDescriptorType, type)):
        return f"fn:{module}.{qualname}"
    raise Uncacheable(f"a callable of type {type(fn).__name__}")


_SCALARS = (bool, int, str, type(None))
_TORCH_ENUMS = (torch.dtype, torch.device, torch.layout, torch.memory_format)


def describe_value(value) -> str:
    """An exact text for a node argument; ``Uncacheable`` when there is none."""
    if isinstance(value, torch.fx.Node):
        return f"%{value.name}"
    if isinstance(value, _SCALARS):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, float):
        return f"float:{value.hex()}"
    if isinstance(value, complex):
        return f"complex:{value.real.hex()},{value.imag.hex()}"
    if isinstance(value, _TORCH_ENUMS):
        return f"{type(value).__name__}:{value}"
    if isinstance(value, torch.Tensor):
        return _describe_tensor(value, with_data=True)
    if isinstance(value, (tuple, list)):  # torch.Size is a tuple
        return f"{type(value).__name__}[{','.join(describe_value(v) for v in value)}]"
    if isinstance(value, dict):
        return "dict{" + ",".join(f"{describe_value(k)}:{describe_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, slice):
        return f"slice({describe_value(value.start)},{describe_value(value.stop)},{describe_value(value.step)})"
    if value is Ellipsis:
        return "..."
    if callable(value):
        return _describe_callable(value)
    raise Uncacheable(f"an argument of type {type(value).__name__}")


def _describe_node(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    if node.op == "call_module":
        raise Uncacheable("a submodule call")
    if node.op == "call_function":
        target = _describe_callable(node.target)
    elif node.op == "get_attr":
        value = gm
        for part in node.target.split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor):
            raise Uncacheable(f"a get_attr of a {type(value).__name__}")
        # Tensor attributes are lifted into graph inputs: their layout is in the
        # key with the inputs', and the compiled code reads their values at run time.
        target = f"{node.target}={_describe_tensor(value, with_data=False)}"
    else:
        target = str(node.target)
    return (f"{node.op}|{node.name}|{target}|{describe_value(tuple(node.args))}|"
            f"{describe_value(dict(node.kwargs))}")


def _describe_input(x) -> str:
    if isinstance(x, torch.Tensor):
        return _describe_tensor(x, with_data=False)
    if isinstance(x, (bool, int, float, type(None))):
        return describe_value(x)
    raise Uncacheable(f"a graph input of type {type(x).__name__}")


def graph_key(gm: torch.fx.GraphModule, inputs: list, variant: tuple, knobs: tuple) -> str | None:
    """The cache key of compiling ``gm`` for ``inputs`` (user inputs, then lifted state),
    or None when the graph cannot be described exactly (it is then not cached)."""
    digest = hashlib.sha256()
    try:
        parts = [f"format {FORMAT}", versions_fingerprint(), gm.code]
        parts += [_describe_node(gm, node) for node in gm.graph.nodes]
        parts += [_describe_input(x) for x in inputs]
        parts += [repr(variant), f"grad={torch.is_grad_enabled()}", f"dtype={torch.get_default_dtype()}",
                  f"matmul={torch.get_float32_matmul_precision()}", repr(knobs)]
    except Uncacheable as why:
        logs.log("perf", f"graph cache: not cached ({why})")
        return None
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:40]


# ---------------------------------------------------------------- entries

@dataclasses.dataclass
class Entry:
    """What one compiled variant needs to run: aot's runtime metadata and the backend's artifacts."""
    key: str
    program: Any                  # the aot layer's TracedProgram, without its graph
    forward: Any                  # the backend's artifact of the forward (or inference) graph
    backward: Any = None          # and of the backward graph (training)
    format: int = FORMAT


def _resolve_op(name: str):
    namespace, op_name, overload = name.split(".")
    packet = getattr(getattr(torch.ops, namespace), op_name)
    return packet if overload == "<packet>" else getattr(packet, overload)


class _Pickler(pickle.Pickler):
    # torch's op objects do not pickle: store them by name.
    def reducer_override(self, obj):
        if isinstance(obj, torch._ops.OpOverload):
            return _resolve_op, (f"{obj.namespace}.{obj._opname}.{obj._overloadname}",)
        if isinstance(obj, torch._ops.OpOverloadPacket):
            return _resolve_op, (f"{obj._qualified_op_name.replace('::', '.')}.<packet>",)
        return NotImplemented


def store(cache_dir: str, entry: Entry) -> bool:
    """Write ``entry``; False (logged) when it cannot be pickled or written."""
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(entry)
    except Exception as why:  # something in the metadata does not pickle: not cached
        logs.log("perf", f"graph cache: entry {entry.key[:12]} not stored ({type(why).__name__}: {why})")
        return False
    return cache_store.store(cache_dir, "graph_cache").write_bytes(f"{entry.key}.pkl", buffer.getvalue()) is not None


def load(cache_dir: str, key: str) -> Entry | None:
    """The entry for ``key``; None when there is none, or it is damaged or unreadable (logged)."""
    data = cache_store.store(cache_dir, "graph_cache").read_bytes(f"{key}.pkl")
    if data is None:
        return None
    try:
        with warnings.catch_warnings():
            # torch's pytree warns when it unpickles the leaf specs it pickled itself
            warnings.simplefilter("ignore", FutureWarning)
            entry = pickle.loads(data)
    except Exception as why:  # intact but not loadable here (a class that moved): recompile and overwrite it
        fallbacks.announce(f"graph cache: ignoring unreadable entry {key[:12]} ({type(why).__name__}: {why})",
                           graph=True, outcome="is compiled again", counted=False, warn=False)
        return None
    if not isinstance(entry, Entry) or entry.format != FORMAT or entry.key != key:
        fallbacks.announce(f"graph cache: ignoring entry {key[:12]} of another format or key",
                           graph=True, outcome="is compiled again", counted=False, warn=False)
        return None
    return entry


def _runtime_program(program):
    """The TracedProgram the runtime needs, without graph nodes; None when a user
    output is a tensor constant (its identity, not a copy, is what eager returns)."""
    for spec in program.outputs:
        if isinstance(spec.value, torch.Tensor):
            return None
    return dataclasses.replace(program, graph_module=None, user_output_nodes=[], input_names=[])


@dataclasses.dataclass(frozen=True)
class CacheSpec:
    """How one backend uses the cache: where, the key of its compile, and how it loads artifacts.

    ``config_key`` is ``CompileConfig.cache_key(target)``: every option that changes the
    compiled code and the target's decisions and knobs (GPU, or compiler and CPU).
    Compiled graphs describe themselves with ``artifact()`` (picklable);
    ``load_artifact(artifact)`` turns one back into the compiled callable."""
    cache_dir: str
    config_key: str
    load_artifact: Callable[[Any], Callable]

    def key(self, gm, inputs: list, variant: tuple, options=None) -> str | None:
        return graph_key(gm, inputs, variant, (self.config_key,))

    def load(self, key: str):
        """(program, forward, backward or None) of a stored variant, or None."""
        entry = load(self.cache_dir, key)
        if entry is None:
            counters["graph_cache_misses"] += 1
            return None
        try:
            forward = self.load_artifact(entry.forward)
            backward = None if entry.backward is None else self.load_artifact(entry.backward)
        except Exception as why:  # e.g. a kernel library that no longer loads: recompile
            fallbacks.announce(f"graph cache: entry {key[:12]} did not load ({type(why).__name__}: {why})",
                               graph=True, outcome="is compiled again", counted=False, warn=False)
            counters["graph_cache_misses"] += 1
            return None
        counters["graph_cache_hits"] += 1
        logs.log("perf", f"graph cache: hit {key[:12]}")
        if logs.enabled("output_code"):  # as a fresh compile prints it
            for compiled in (forward, backward):
                if getattr(compiled, "source", None) is not None:
                    logs.log("output_code", f"{compiled.path} (from the graph cache)\n{compiled.source}")
        return entry.program, forward, backward

    def store(self, key: str, program, forward, backward=None) -> bool:
        """Store a freshly compiled variant; False when some part cannot be cached."""
        compiled = [forward] if backward is None else [forward, backward]
        artifacts = [getattr(c, "artifact", lambda: None)() for c in compiled]
        runtime_program = _runtime_program(program)
        if runtime_program is None or any(a is None for a in artifacts):
            logs.log("perf", f"graph cache: variant {key[:12]} not stored (a part ran eagerly or is a constant)")
            return False
        return store(self.cache_dir, Entry(key, runtime_program, *artifacts))
