"""Keep torch's "disable Dynamo here" wrappers from importing torch._dynamo.

torch wraps some of its own Python functions with ``torch._disable_dynamo``:
the reference implementations that meta tensors run (``torch._refs``: every
type-promoting elementwise op) and the ``__torch_dispatch__`` of every
``TorchDispatchMode`` subclass. On its first call such a wrapper imports
``torch._dynamo`` (about 1 s, a third of a fresh process's first compile) to
build the real disabling wrapper, and caches it on the wrapped function as
``__dynamo_disable``.

Until ``torch._dynamo`` is imported, Dynamo cannot be tracing anything, so
disabling it is a no-op. ``defer_dynamo_import`` gives each such wrapper a
``__dynamo_disable`` that calls the function directly while that holds. Once
someone else has imported Dynamo (``torch.compile`` in the same process, say),
it removes itself and hands the call to torch's wrapper, which then builds
Dynamo's disable as it always does: surge never calls Dynamo, and behaviour is
torch's own in both cases; only the import is no longer forced by surge's tracing.

Wrappers are recognised by the code object of ``torch._disable_dynamo``'s inner
function; on a torch where that shape differs nothing is changed.
"""
from __future__ import annotations

import sys
import types

# Modules whose functions meta tensors and surge's tracing run through.
_MODULE_PREFIXES = ("torch._refs", "torch._prims", "torch._decomp", "torch._meta_registrations")
_MAX_DEPTH = 8
# Where torch's wrapper caches the disabled function (read on every call).
_ATTRIBUTE = "__dynamo_disable"
_scanned_modules: set[str] = set()
_patched_classes: set[type] = set()
# How many modules were loaded at the last scan: wrappers and dispatch modes are defined
# when a module is imported, so with no module loaded since there is nothing new to patch
_modules_at_last_scan = -1


class _DisableWhenDynamoLoaded:
    """``fn`` as is while torch._dynamo is not imported; torch's own wrapper after."""

    __slots__ = ("fn", "wrapper")

    def __init__(self, fn, wrapper):
        self.fn = fn
        self.wrapper = wrapper

    def __call__(self, *args, **kwargs):
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None or not hasattr(dynamo, "disable"):
            return self.fn(*args, **kwargs)
        # Someone imported Dynamo: step aside for good. torch's wrapper, finding no
        # cached disable, builds Dynamo's own as if this module had never been here.
        if getattr(self.fn, _ATTRIBUTE, None) is self:
            delattr(self.fn, _ATTRIBUTE)
        return self.wrapper(*args, **kwargs)


def _wrapper_code():
    try:
        import torch._compile
        probe = torch._compile._disable_dynamo(lambda: None)
    except (ImportError, AttributeError, TypeError):
        return None
    code = getattr(probe, "__code__", None)
    if code is None or set(code.co_freevars) != {"fn", "recursive"}:
        return None
    return code


def _patch(wrapper) -> None:
    cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__))
    try:
        fn = cells["fn"].cell_contents
    except ValueError:  # an empty cell: not the wrapper we know
        return
    if getattr(fn, _ATTRIBUTE, None) is None:
        try:
            setattr(fn, _ATTRIBUTE, _DisableWhenDynamoLoaded(fn, wrapper))
        except (AttributeError, TypeError):  # a builtin that takes no attributes
            pass


def _walk(fn, code, seen: set, depth: int = 0) -> None:
    """Find disable wrappers in ``fn``, the functions it wraps and those in its closure."""
    if depth > _MAX_DEPTH or id(fn) in seen:
        return
    seen.add(id(fn))
    if fn.__code__ is code:
        _patch(fn)
    inner = getattr(fn, "__wrapped__", None)
    if isinstance(inner, types.FunctionType):
        _walk(inner, code, seen, depth + 1)
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, types.FunctionType):
            _walk(value, code, seen, depth + 1)


def _subclasses(cls) -> list:
    out, stack = [], [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            out.append(sub)
            stack.append(sub)
    return out


def defer_dynamo_import() -> None:
    """Patch the disable wrappers reachable now (cheap to call again: done work is skipped)."""
    global _modules_at_last_scan
    if "torch._dynamo" in sys.modules:
        return  # already imported: nothing left to save
    if len(sys.modules) == _modules_at_last_scan:
        return
    _modules_at_last_scan = len(sys.modules)
    code = _wrapper_code()
    if code is None:
        return
    seen: set = set()
    for name, module in list(sys.modules.items()):
        if module is None or name in _scanned_modules or not name.startswith(_MODULE_PREFIXES):
            continue
        _scanned_modules.add(name)
        for value in list(vars(module).values()):
            if isinstance(value, types.FunctionType):
                _walk(value, code, seen)
            elif isinstance(value, dict):  # decomposition and meta tables
                for entry in list(value.values()):
                    if isinstance(entry, types.FunctionType):
                        _walk(entry, code, seen)
    from torch.utils._python_dispatch import TorchDispatchMode

    for cls in [TorchDispatchMode] + _subclasses(TorchDispatchMode):
        if cls in _patched_classes:
            continue
        _patched_classes.add(cls)
        dispatch = cls.__dict__.get("__torch_dispatch__")
        if isinstance(dispatch, types.FunctionType):
            _walk(dispatch, code, seen)
    base = sys.modules.get("torch.utils._python_dispatch")
    if base is not None and hasattr(base, "BaseTorchDispatchMode"):
        dispatch = base.BaseTorchDispatchMode.__dict__.get("__torch_dispatch__")
        if isinstance(dispatch, types.FunctionType):
            _walk(dispatch, code, seen)
