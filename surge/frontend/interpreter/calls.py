"""Handlers for attribute loads, calls, function creation, `with` and imports."""
from __future__ import annotations

from ..sources import ConstSource
from ..variables.base import NULL, AttributeMissing, unsupported
from ..variables.containers import DictVariable
from ..variables.functions import NestedFunctionVariable
from ..variables.objects import SuperVariable
from .registry import opcode


def load_attribute(frame, obj, name):
    try:
        return obj.getattr(frame.tracer, name)
    except AttributeMissing:
        unsupported(f"AttributeError: {obj} has no attribute {name!r}")


@opcode("LOAD_ATTR", versions=(3, 11))
def _load_attr_311(frame, inst):
    frame.push(load_attribute(frame, frame.pop(), inst.argval))


@opcode("LOAD_METHOD", versions=(3, 11))
def _load_method(frame, inst):
    obj = frame.pop()
    frame.push(NULL)
    frame.push(load_attribute(frame, obj, inst.argval))


@opcode("LOAD_ATTR", versions=(3, 12))
def _load_attr_312(frame, inst):
    obj = frame.pop()
    if inst.arg & 1:
        # The method form: CALL finds NULL below the (already bound) callable.
        frame.push(NULL)
    frame.push(load_attribute(frame, obj, inst.argval))


@opcode("LOAD_SUPER_ATTR", versions=(3, 12))
def _load_super_attr(frame, inst):
    self_var = frame.pop()
    cls_var = frame.pop()
    frame.pop()  # the global `super`
    from ..variables.builtins import _class_of

    sup = SuperVariable(_class_of(cls_var), self_var)
    if inst.arg & 1:
        frame.push(NULL)
    frame.push(load_attribute(frame, sup, inst.argval))


@opcode("KW_NAMES")
def _kw_names(frame, inst):
    # dis does not resolve this operand: it indexes the code's constants.
    frame.kw_names = frame.code.co_consts[inst.arg]


def call_function(frame, fn, args, kwargs):
    frame.calling = fn  # what a break at this call hands to CPython (Frame.handler_needs_exc_info)
    return fn.call(frame.tracer, args, kwargs)


@opcode("CALL")
def _call(frame, inst):
    args = frame.popn(inst.arg)
    fn = frame.pop()
    below = frame.pop()
    if below is not NULL:
        # [callable, self, args...]: the unbound-method layout.
        args = [fn, *args]
        fn = below
    kw_names = frame.kw_names
    frame.kw_names = ()
    kwargs = {}
    if kw_names:
        kwargs = dict(zip(kw_names, args[len(args) - len(kw_names):]))
        args = args[:len(args) - len(kw_names)]
    frame.push(call_function(frame, fn, args, kwargs))


@opcode("CALL_FUNCTION_EX")
def _call_function_ex(frame, inst):
    kwargs = frame.pop() if inst.arg & 1 else None
    args = frame.pop()
    fn = frame.pop()
    below = frame.pop()
    if below is not NULL:
        frame.push(below)
    tx = frame.tracer
    if kwargs is not None and not isinstance(kwargs, DictVariable):
        unsupported(f"** of {kwargs}")
    kw = {}
    if kwargs is not None:
        for k, v in kwargs.items.items():
            if not isinstance(k, str):
                unsupported("keywords must be strings")
            kw[k] = v
    frame.push(call_function(frame, fn, args.iterate(tx), kw))


@opcode("MAKE_FUNCTION")
def _make_function(frame, inst):
    code = frame.pop().as_constant()
    flags = inst.arg
    tx = frame.tracer
    cells = frame.pop().iterate(tx) if flags & 0x08 else []
    annotations = None
    if flags & 0x04:  # (name, value, name, value, ...): read back as __annotations__
        flat = frame.pop().iterate(tx)
        annotations = DictVariable({k.as_constant(): v for k, v in zip(flat[::2], flat[1::2])})
    kwdefaults = frame.pop() if flags & 0x02 else None
    kwdefaults = {} if kwdefaults is None else {k.as_constant(): kwdefaults.getitem(tx, k)
                                                 for k in kwdefaults.iterate(tx)}
    defaults = tuple(frame.pop().iterate(tx)) if flags & 0x01 else ()
    frame.push(NestedFunctionVariable(code, frame.f_globals, defaults, dict(kwdefaults), list(cells),
                                      getattr(code, "co_qualname", code.co_name), annotations))


@opcode("BEFORE_WITH")
def _before_with(frame, inst):
    ctx = frame.pop()
    tx = frame.tracer
    exit_fn = load_attribute(frame, ctx, "__exit__")
    enter_fn = load_attribute(frame, ctx, "__enter__")
    frame.push(exit_fn)
    frame.push(enter_fn.call(tx, [], {}))


@opcode("IMPORT_NAME")
def _import_name(frame, inst):
    fromlist = frame.pop().as_constant()
    level = frame.pop().as_constant()
    module = __import__(inst.argval, frame.f_globals, None, fromlist, level)
    # The module object is fixed (sys.modules); what the trace reads of it is read, and
    # guarded, through it: a module-level tensor becomes a graph input.
    frame.push(frame.tracer.wrap(module, ConstSource(module, module.__name__)))


@opcode("IMPORT_FROM")
def _import_from(frame, inst):
    frame.push(load_attribute(frame, frame.peek(), inst.argval))

