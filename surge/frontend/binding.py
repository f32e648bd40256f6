"""Binding a call's arguments to the root frame's parameters, as sources.

Each parameter becomes a lazily-wrapped input read from a source expression
over the call's ``args``/``kwargs`` (or the function's defaults), together with
one guard on the call's shape that makes those expressions valid. Parameters
past the positional arguments are read "however the call passes them", so
``f(x)``, ``f(x, None)`` and ``f(x, bias=None)`` share one cache entry.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..errors import Unsupported
from .interpreter.frame import LazyInput
from .sources import ArgSource, DefaultSource, KwargSource, ParamSource, RootFunctionSource
from .variables.containers import DictVariable, TupleVariable


def bind_root(tracer, fn, args: tuple, kwargs: dict) -> dict:
    code = fn.__code__
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return _bind_exact(tracer, fn, args, kwargs)
    nargs, nkwonly, posonly = code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount
    names = code.co_varnames
    if len(args) > nargs:
        raise Unsupported(f"{code.co_name}() takes {nargs} positional arguments but {len(args)} were given")
    keyword_params = set(names[posonly:nargs + nkwonly])
    for key in kwargs:
        if key not in keyword_params:
            raise Unsupported(f"{code.co_name}() got an unexpected keyword argument {key!r}")
        if names.index(key) < len(args):
            raise Unsupported(f"{code.co_name}() got multiple values for argument {key!r}")
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    first_default = nargs - len(defaults)
    bound: dict = {}
    required = []
    for i, name in enumerate(names[:nargs + nkwonly]):
        positional = i < nargs
        if positional and i < len(args):
            bound[name] = LazyInput(args[i], ArgSource(i, name))
            continue
        if positional:
            default = i - first_default if i >= first_default else None
        else:
            default = name if name in kwdefaults else None
        if default is None:
            required.append(name)
        if name in kwargs:
            value = kwargs[name]
        elif default is not None:
            value = defaults[default] if positional else kwdefaults[name]
        else:
            raise Unsupported(f"{code.co_name}() missing required argument {name!r}")
        bound[name] = LazyInput(value, ParamSource(name, i if positional else None, default))
    lo = len(args)
    count = f"len(args) == {lo}" if lo == nargs else f"{lo} <= len(args) <= {nargs}"
    if lo == nargs and not nkwonly:
        condition = f"{count} and not kwargs"
    else:
        # Any later call with at least as many positional arguments, and keywords
        # only for parameters past them, binds through the same sources.
        accepts = tracer.consts.ref(_keyword_acceptor(names, nargs, keyword_params, required), "call_accepts")
        condition = f"{count} and (not kwargs or {accepts}(len(args), kwargs))"
    text = f"called with {lo} positional arguments" if lo == nargs else (
        f"called with {lo} to {nargs} positional arguments, keywords only for parameters past them")
    tracer.guards.add(None, condition, text)
    return bound


@dataclass(frozen=True)
class _KeywordAcceptor:
    """Whether a call's keywords bind as the captured call's did (a plain value: an entry
    that names it can be stored on disk)."""
    position: dict        # name -> index of the positional parameters
    nargs: int
    keyword_params: frozenset
    required: tuple

    disk_value = True

    def __call__(self, npos, kwargs):
        position = self.position
        for key in kwargs:
            if key not in self.keyword_params or position.get(key, self.nargs) < npos:
                return False
        return all(name in kwargs or position.get(name, self.nargs) < npos for name in self.required)


def _keyword_acceptor(names, nargs, keyword_params, required):
    return _KeywordAcceptor({name: i for i, name in enumerate(names[:nargs])}, nargs,
                            frozenset(keyword_params), tuple(required))


def _bind_exact(tracer, fn, args: tuple, kwargs: dict) -> dict:
    """Functions with *args/**kwargs: guarded on the exact call shape."""
    code = fn.__code__
    kw = "not kwargs" if not kwargs else f"tuple(kwargs) == {tuple(kwargs)!r}"
    tracer.guards.add(None, f"len(args) == {len(args)} and {kw}",
                      f"called with {len(args)} positional arguments and keywords {list(kwargs)}")
    nargs, nkwonly, posonly = code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount
    names = code.co_varnames
    bound: dict = {}
    for i, name in enumerate(names[:nargs]):
        if i < len(args):
            bound[name] = LazyInput(args[i], ArgSource(i, name))
    index = nargs + nkwonly
    if code.co_flags & inspect.CO_VARARGS:
        star = names[index]
        bound[star] = TupleVariable([tracer.wrap(a, ArgSource(nargs + j, f"{star}[{j}]"))
                                     for j, a in enumerate(args[nargs:])])
        index += 1
    elif len(args) > nargs:
        raise Unsupported(f"{code.co_name}() takes {nargs} positional arguments but {len(args)} were given")
    extra = {}
    for key, value in kwargs.items():
        if key in names[posonly:nargs + nkwonly] and key not in bound:
            bound[key] = LazyInput(value, KwargSource(key, key))
        elif key in bound:
            raise Unsupported(f"{code.co_name}() got multiple values for argument {key!r}")
        else:
            extra[key] = value
    if code.co_flags & inspect.CO_VARKEYWORDS:
        star = names[index]
        bound[star] = DictVariable({k: tracer.wrap(v, KwargSource(k, f"{star}[{k!r}]")) for k, v in extra.items()})
    elif extra:
        raise Unsupported(f"{code.co_name}() got an unexpected keyword argument {next(iter(extra))!r}")
    defaults = fn.__defaults__ or ()
    for i, name in enumerate(names[:nargs]):
        if name not in bound:
            d = i - (nargs - len(defaults))
            if d < 0:
                raise Unsupported(f"{code.co_name}() missing required argument {name!r}")
            bound[name] = LazyInput(defaults[d], DefaultSource(RootFunctionSource(), d))
    kwdefaults = fn.__kwdefaults__ or {}
    for name in names[nargs:nargs + nkwonly]:
        if name not in bound:
            if name not in kwdefaults:
                raise Unsupported(f"{code.co_name}() missing required keyword-only argument {name!r}")
            bound[name] = LazyInput(kwdefaults[name], DefaultSource(RootFunctionSource(), name, kwonly=True))
    return bound
