"""Captured entries kept on disk, so a new process skips capture for frames it has seen.

A capture is most of what a warm process pays on its first call: running the
frame's bytecode symbolically, a meta kernel per op (the first of which makes
torch import sympy) and the entry's code generation. This cache stores what a
capture produced for one code object: the entry function's source, the
constants it names, the captured graph and the files of every code object the
trace ran. A later process whose call passes the stored guards runs that entry;
its graph goes to the backend on the first call (which finds the compiled
result in its own disk cache).

A wrong hit would return wrong results, so an entry is only stored when every
piece of it means the same thing in another process:

- constants are named by where they live (a module attribute, checked to be
  the same object when stored), or are plain values; an ``nn.Module`` instance,
  which no name reaches, is read from the call where its identity guard stood
  and checked for the type and the facts the trace assumed of it;
- the code the trace ran is checked by file: a file whose size or modification
  time changed drops the entry;
- the key holds the code object's contents, surge's frontend sources, torch and
  Python versions, the backend's name, the options the frontend reads and
  ``CompileConfig.cache_key()`` (every option that changes compiled code).

Frames split at a graph break, resume functions, recorded fallbacks and entries
with anything else (a tensor constant, a function made at run time) are not
stored; those capture as before. Records are pickles named
``<cache_dir>/frontend/<key>.pkl`` (a list, newest last), written and checked
through ``cache_store``: a damaged file is not unpickled, the next capture
replaces it.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import os
import pickle
import sys
import types

import torch

from .. import cache_store, fallbacks, logs
from ..errors import BackendCompilerFailed
from ..options import CompileConfig, Options, code_fields, default_cache_dir
from .code_kinds import DECORATE_CONTEXT_CODE, is_resume_code
from .codegen import entry_source, exec_entry, identity_target, module_check
from .size_node import is_symbolic
from .stored_sizes import FactsCheck, decode_env, decode_value, encode_env, encode_value

FORMAT = 3   # 3: dynamic captures (their shape environment) are stored too
# Records kept per code object (the newest win): as many as it may recompile.
MAX_RECORDS = 9
_PLAIN = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis))
_TORCH_ENUMS = (torch.dtype, torch.device, torch.layout, torch.memory_format)
_DESCRIPTORS = (types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType,
                types.GetSetDescriptorType, types.MemberDescriptorType)


class Unpersistable(Exception):
    """Something in a capture has no meaning in another process."""


@dataclasses.dataclass
class Record:
    files: dict                  # path -> (size, mtime_ns) of every file whose code the trace ran
    entry_name: str
    source: str                  # the entry function, constants bound as in ``consts``
    consts: dict                 # name -> recipe (``_recipe``)
    graph: list | None           # the captured graph, ``_encode_graph``; None: no graph
    guards_text: str
    autocast: bool               # the graph switches autocast (its compiled form needs a guard)
    shape_env: dict | None = None   # a dynamic capture's symbols and facts (``stored_sizes``)
    format: int = FORMAT


# ---------------------------------------------------------------- the key

@functools.lru_cache(maxsize=1)
def _frontend_fingerprint() -> str:
    return cache_store.sources_fingerprint(("frontend",), f"{torch.__version__} {sys.version}")


def _code_digest(code: types.CodeType, digest) -> None:
    digest.update(code.co_code)
    digest.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars, code.co_argcount,
                        code.co_kwonlyargcount, code.co_posonlyargcount, code.co_flags)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_digest(const, digest)
        else:
            digest.update(_const_text(const).encode())


def _const_text(const) -> str:
    """A code constant as text that is the same in every process (a frozenset's order
    follows string hashing, which differs between processes)."""
    if isinstance(const, frozenset):
        return "frozenset{" + ",".join(sorted(_const_text(c) for c in const)) + "}"
    if isinstance(const, tuple):
        return "(" + ",".join(_const_text(c) for c in const) + ")"
    return f"{type(const).__name__}:{const!r}"


def stores_captures_of(code: types.CodeType) -> bool:
    """Not for code surge generated (resume functions) or torch's decorator wrapper,
    which stand for other code."""
    return not is_resume_code(code) and code is not DECORATE_CONTEXT_CODE


def code_key(code: types.CodeType, options: Options) -> str | None:
    """The key of a code object's records, or None when its captures are not stored."""
    if not isinstance(options.backend, (str, type(None))) or not os.path.isfile(code.co_filename):
        return None  # a backend object, or code not from a file (exec'd, generated resume code)
    digest = hashlib.sha256()
    digest.update(f"format {FORMAT} {_frontend_fingerprint()}".encode())
    digest.update(repr((code.co_filename, code.co_qualname, code.co_firstlineno)).encode())
    _code_digest(code, digest)
    digest.update(_options_key(options).encode())
    return digest.hexdigest()[:40]


# Options that change neither a capture nor compiled code: where files go, the progress
# line, how many compile processes run.
CAPTURE_NEUTRAL_OPTIONS = frozenset({"cache_dir", "debug_dir", "progress", "compile_workers", "native_checks"})


def _options_key(options: Options) -> str:
    """The options' part of the key: every option but those above by value, except the
    ones that change compiled code, which enter as ``CompileConfig``'s one ``cache_key()``:
    a record is reused only under a config whose graphs compile to the same code, whatever
    fields that config grows."""
    by_config = set(code_fields())
    kept = [(f.name, getattr(options, f.name)) for f in dataclasses.fields(options)
            if f.name not in CAPTURE_NEUTRAL_OPTIONS and f.name not in by_config]
    return f"{kept!r} config {CompileConfig.from_options(options).cache_key()}"


# ---------------------------------------------------------------- constants

def _resolve(module: str, qualname: str):
    """The object at ``module``.``qualname`` in this process, importing nothing."""
    parts = module.split(".")
    obj = sys.modules.get(module)
    if obj is None:  # a C submodule (torch._C._nn) is an attribute, not in sys.modules
        obj = sys.modules.get(parts[0])
        for part in parts[1:]:
            obj = getattr(obj, part)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _named(value) -> tuple:
    """The recipe of an object reached by a name; Unpersistable when there is none."""
    if isinstance(value, types.ModuleType):
        recipe = ("module", value.__name__)
    elif isinstance(value, enum.Enum):
        recipe = ("attr", _named(type(value)), value.name)
    elif isinstance(value, _DESCRIPTORS):
        recipe = ("attr", _named(value.__objclass__), value.__name__)
    elif isinstance(value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        recipe = ("op", _op_name(value))
    else:
        module = getattr(value, "__module__", None)
        qualname = getattr(value, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
            raise Unpersistable(f"{type(value).__name__} {qualname or value!r} has no stable name")
        # torch's C functions are named after the class that defines them
        # (``_VariableFunctionsClass.arange``) but reached as module attributes.
        for recipe in (("named", module, qualname), ("named", module, getattr(value, "__name__", qualname))):
            if _names(recipe, value):
                return recipe
        if isinstance(value, type) and module == "builtins":  # types.FunctionType & co
            for name, candidate in vars(types).items():
                if candidate is value:
                    return ("named", "types", name)
        # A decorated function's original, which the trace inlines: ``__wrapped__`` of the name.
        recipe = ("named", module, qualname)
        for _ in range(4):
            recipe = ("attr", recipe, "__wrapped__")
            if _names(recipe, value):
                return recipe
        raise Unpersistable(f"{module}.{qualname} does not name the captured object")
    if not _names(recipe, value):
        raise Unpersistable(f"{recipe} does not name the captured object")
    return recipe


def _names(recipe: tuple, value) -> bool:
    try:
        return _build(recipe) is value
    except Exception:
        return False


def _op_name(op) -> str:
    if isinstance(op, torch._ops.OpOverload):
        return f"{op.namespace}.{op._opname}.{op._overloadname}"
    return f"{op._qualified_op_name.replace('::', '.')}.<packet>"


def _recipe(value) -> tuple:
    if type(value) in _PLAIN or isinstance(value, _TORCH_ENUMS):
        return ("value", value)
    if type(value) in (tuple, frozenset, range, slice):
        pickle.dumps(value)  # plain values only (their guards compare by ==)
        return ("value", value)
    if getattr(type(value), "disk_value", False):  # surge's own helpers that are plain data
        pickle.dumps(value)
        return ("value", value)
    if type(value) is dict:
        module = sys.modules.get(value.get("__name__", ""))
        if module is not None and module.__dict__ is value:
            return ("globals", value["__name__"])
        raise Unpersistable("a dict constant")
    return _named(value)


def _build(recipe: tuple):
    kind = recipe[0]
    if kind == "value":
        return recipe[1]
    if kind == "module":
        return sys.modules[recipe[1]]
    if kind == "globals":
        return sys.modules[recipe[1]].__dict__
    if kind == "named":
        return _resolve(recipe[1], recipe[2])
    if kind == "attr":
        return getattr(_build(recipe[1]), recipe[2])
    if kind == "op":
        namespace, name, overload = recipe[1].split(".")
        packet = getattr(getattr(torch.ops, namespace), name)
        return packet if overload == "<packet>" else getattr(packet, overload)
    raise Unpersistable(f"unknown recipe {kind}")


def _identity_guarded(guards) -> set:
    return {identity_target(g) for g in guards.guards} - {None}


# ---------------------------------------------------------------- the graph

@dataclasses.dataclass(frozen=True)
class _NodeRef:
    name: str


@dataclasses.dataclass(frozen=True)
class _Callable:
    recipe: tuple


@dataclasses.dataclass(frozen=True)
class _MetaTensor:
    shape: tuple
    stride: tuple
    dtype: torch.dtype
    requires_grad: bool


def _encode_arg(value):
    if isinstance(value, torch.fx.Node):
        return _NodeRef(value.name)
    if type(value) in _PLAIN or isinstance(value, _TORCH_ENUMS) or isinstance(value, torch.Size):
        return value
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list, torch.fx.immutable_collections.immutable_list):
        return (tuple if type(value) is tuple else list)(_encode_arg(v) for v in value)
    if type(value) in (dict, torch.fx.immutable_collections.immutable_dict):
        return {k: _encode_arg(v) for k, v in value.items()}
    if type(value) is slice:
        return slice(_encode_arg(value.start), _encode_arg(value.stop), _encode_arg(value.step))
    if callable(value):
        return _Callable(_named(value))
    raise Unpersistable(f"a graph argument of type {type(value).__name__}")


def _decode_arg(value, nodes: dict):
    if isinstance(value, _NodeRef):
        return nodes[value.name]
    if isinstance(value, _Callable):
        return _build(value.recipe)
    if type(value) in (tuple, list):
        return type(value)(_decode_arg(v, nodes) for v in value)
    if type(value) is dict:
        return {k: _decode_arg(v, nodes) for k, v in value.items()}
    if type(value) is slice:
        return slice(_decode_arg(value.start, nodes), _decode_arg(value.stop, nodes), _decode_arg(value.step, nodes))
    return value


@dataclasses.dataclass(frozen=True)
class _StructSeq:
    """A torch.return_types value (``max``, ``topk``, ...)."""
    cls: tuple
    items: tuple


def _encode_val(value):
    if isinstance(value, torch.Tensor):
        return _MetaTensor(tuple(encode_value(v) for v in value.shape), tuple(encode_value(v) for v in value.stride()),
                           value.dtype, value.requires_grad)
    if is_symbolic(value):
        return encode_value(value)
    if type(value) in (tuple, list):
        return type(value)(_encode_val(v) for v in value)
    if isinstance(value, tuple) and type(value).__module__ == "torch.return_types":
        return _StructSeq(_named(type(value)), tuple(_encode_val(v) for v in value))
    if type(value) in _PLAIN:
        return value
    raise Unpersistable(f"a node value of type {type(value).__name__}")


def _decode_val(value, env):
    if isinstance(value, _MetaTensor):
        meta = torch.empty_strided([decode_value(v, env) for v in value.shape],
                                   [decode_value(v, env) for v in value.stride], dtype=value.dtype, device="meta")
        return meta.requires_grad_(True) if value.requires_grad else meta
    if isinstance(value, _StructSeq):
        return _build(value.cls)(tuple(_decode_val(v, env) for v in value.items))
    if type(value) in (tuple, list):
        return type(value)(_decode_val(v, env) for v in value)
    return decode_value(value, env)


_META_KEYS = ("source", "stack_trace")


def _encode_graph(gm: torch.fx.GraphModule) -> list:
    nodes = []
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module"):
            raise Unpersistable(f"a {node.op} node")
        target = _Callable(_named(node.target)) if node.op == "call_function" else node.target
        meta = {k: node.meta[k] for k in _META_KEYS if k in node.meta}
        if "val" in node.meta:
            meta["val"] = _encode_val(node.meta["val"])
        if "device" in node.meta:
            meta["device"] = node.meta["device"]
        nodes.append((node.op, node.name, target, _encode_arg(node.args), _encode_arg(dict(node.kwargs)), meta))
    return nodes


def _decode_graph(nodes: list, env=None) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    made: dict = {}
    for op, name, target, args, kwargs, meta in nodes:
        if isinstance(target, _Callable):
            target = _build(target.recipe)
        node = graph.create_node(op, target, _decode_arg(args, made), _decode_arg(kwargs, made), name=name)
        if node.name != name:
            raise Unpersistable(f"node {name} became {node.name}")
        node.meta.update({k: v for k, v in meta.items() if k != "val"})
        if "val" in meta:
            node.meta["val"] = _decode_val(meta["val"], env)
        made[name] = node
    return torch.fx.GraphModule(torch.nn.Module(), graph, class_name="SurgeGraph")


# ---------------------------------------------------------------- records

def make_record(tracer, gm, *, input_sources: list, return_expr, effects) -> Record | None:
    """What to store of a finished capture (no graph break, no fallback); None (logged)
    when some part of it has no meaning in another process."""
    from .variables.hashing import process_order_reads

    if process_order_reads() != tracer.order_reads_at_start:
        logs.log("perf", "frontend disk cache: capture not stored (it read the order of a set of strings, "
                         "which another process's hashing orders otherwise)")
        return None
    try:
        files = {}
        for path in sorted(tracer.code_files):
            if path.startswith("<frozen "):
                continue  # the standard library's frozen modules: the Python version is in the key
            stat = os.stat(path)  # a file that is not there (exec'd code): not stored
            files[path] = (stat.st_size, stat.st_mtime_ns)
        identity_guarded = _identity_guarded(tracer.guards)
        bound = {name: module_check(value, tracer.consts.ref(type(value), type(value).__name__))
                 for name, value in list(tracer.consts.objects())
                 if isinstance(value, torch.nn.Module) and name in identity_guarded}
        name, source = entry_source(tracer.guards, tracer.consts, input_sources=input_sources,
                                    return_expr=return_expr, effects=effects, has_graph=gm is not None,
                                    bound=bound)
        # every constant the source names, with those the module checks and the source added
        consts = {name: _recipe(value) for name, value in tracer.consts.objects() if name not in bound}
        graph = _encode_graph(gm) if gm is not None else None
    except Exception as why:  # storing is an optimization: the capture itself stands
        logs.log("perf", f"frontend disk cache: capture not stored ({type(why).__name__}: {why})")
        return None
    from .variables.autocast import AUTOCAST_GRAPH_FUNCTIONS

    autocast = gm is not None and any(n.target in AUTOCAST_GRAPH_FUNCTIONS for n in gm.graph.nodes)
    shape_env = encode_env(tracer.dynamic.env) if tracer.dynamic.active else None
    return Record(files, name, source, consts, graph, tracer.guards.render(), autocast, shape_env)


def _files_unchanged(record: Record) -> bool:
    for path, (size, mtime) in record.files.items():
        try:
            stat = os.stat(path)
        except OSError:
            return False
        if (stat.st_size, stat.st_mtime_ns) != (size, mtime):
            return False
    return True


class _GraphOnFirstCall:
    """A stored entry's graph, handed to the backend on the entry's first run (with
    that call's inputs as examples); then the entry calls the backend's result directly."""

    def __init__(self, record: Record, backend, namespace: dict, site, options: Options, env=None):
        self.record = record
        self.env = env          # the restored shape environment of a dynamic capture
        self.backend = backend
        self.namespace = namespace
        self.site = site        # the user's code, for a fallback's warning (fallbacks.py)
        self.options = options
        self.graph_module = None

    def __call__(self, *args):
        from .backend_call import call_backend

        gm = self.graph_module
        before = FactsCheck.state(self.env) if self.env is not None else None
        with fallbacks.at_user_code(self.site):
            try:
                compiled = call_backend(self.backend, gm, list(args))
            except BackendCompilerFailed as e:  # as a capture's backend failure: this graph runs eagerly
                if self.options.raise_internal_errors:
                    raise fallbacks.with_context(e.__cause__ or e, "the backend's compile of a stored graph")
                if self.options.fullgraph:
                    raise
                fallbacks.announce(f"{e} (a graph stored in the frontend disk cache)")
                compiled = gm
        if before is not None and FactsCheck.state(self.env) != before:
            # the backend decided something the stored entry does not check
            logs.log("dynamic", "the backend's trace of a stored dynamic graph added conditions on sizes: "
                                "calls that break them run the graph as captured")
            compiled = FactsCheck(self.env, before, gm, compiled, gm)
        if self.record.autocast:
            from .variables.autocast import restore_autocast_on_error

            compiled = restore_autocast_on_error(compiled)
        self.namespace["compiled"] = compiled
        return compiled(*args)


def runnable(record: Record, backend, entry_counters, site, options: Options):
    """(entry function, graph module) of a stored record in this process, or None.
    ``site``: the user's code it runs (``fallbacks.UserSite``); ``options``: the compile's."""
    if record.format != FORMAT or not _files_unchanged(record):
        return None
    try:
        namespace = {name: _build(recipe) for name, recipe in record.consts.items()}
        env = decode_env(record.shape_env) if record.shape_env is not None else None
        gm = _decode_graph(record.graph, env) if record.graph is not None else None
    except Exception as why:  # a name that is not there (yet) in this process
        logs.log("perf", f"frontend disk cache: stored entry not usable here ({type(why).__name__}: {why})")
        return None
    from .codegen import MISS

    lazy = _GraphOnFirstCall(record, backend, namespace, site, options, env)
    lazy.graph_module = gm
    namespace.update(MISS=MISS, compiled=lazy if gm is not None else None, counters=entry_counters)
    return exec_entry(record.entry_name, record.source, namespace), gm


# ---------------------------------------------------------------- files

def _store(options: Options):
    return cache_store.store(default_cache_dir(options), "frontend")


def load_records(options: Options, key: str) -> list:
    data = _store(options).read_bytes(f"{key}.pkl")
    if data is None:
        return []
    try:
        records = pickle.loads(data)
    except Exception as why:  # intact but not ours to read (another surge's classes): captures overwrite it
        fallbacks.announce(f"frontend disk cache: ignoring unreadable {key[:12]} ({type(why).__name__}: {why})",
                           outcome="is captured again", counted=False, warn=False)
        return []
    return [r for r in records if isinstance(r, Record) and r.format == FORMAT] if isinstance(records, list) else []


def store_record(options: Options, key: str, record: Record) -> None:
    records = [r for r in load_records(options, key) if _files_unchanged(r)]
    records = (records + [record])[-MAX_RECORDS:]
    try:
        data = pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as why:
        logs.log("perf", f"frontend disk cache: not stored ({type(why).__name__}: {why})")
        return
    _store(options).write_bytes(f"{key}.pkl", data)
