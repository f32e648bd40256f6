"""Callables: user functions (inlined), methods, closures made during the trace,
and bound methods of tensors, containers and constants."""
from __future__ import annotations

import functools
import inspect
import types

from .base import AttributeMissing, Variable, raise_in_user_code, unsupported
from .constant import NONE, ConstantVariable
from .containers import DictVariable, EntryTable, IteratorVariable, TupleVariable
from ..wrappers import compiled_original

CO_VARARGS = inspect.CO_VARARGS
CO_VARKEYWORDS = inspect.CO_VARKEYWORDS
# Attributes of a function object that hold data (not derived from its code).
# What a function made in the trace may have set (``functools.wraps``-style renaming).
FUNCTION_METADATA = ("__name__", "__qualname__", "__doc__", "__module__")
FUNCTION_DATA_ATTRIBUTES = {"__module__", "__doc__", "__defaults__", "__kwdefaults__", "__annotations__", "__dict__"}


class CellVariable(Variable):
    """A closure cell: its contents are a symbolic value, or read lazily from a real cell."""

    def __init__(self, value: Variable | None = None, lazy=None):
        self._value = value
        self._lazy = lazy  # (real cell, source) read on first use
        self.source = lazy[1] if lazy is not None else None
        # The real cell behind it, if it was read from a function's closure (a graph
        # break hands that same cell on).
        self.real_cell = lazy[0] if lazy is not None else None

    def load(self, tx) -> Variable:
        if self._value is None and self._lazy is not None:
            cell, source = self._lazy
            try:
                contents = cell.cell_contents
            except ValueError:
                unsupported("reading a closure variable before it is assigned")
            self._value = tx.wrap(contents, source)
            self._lazy = None
        if self._value is None:
            unsupported("reading a closure variable before it is assigned")
        return self._value

    def contents(self) -> Variable | None:
        """The value the trace assigned to this cell, if any (a graph break passes it on)."""
        return self._value

    def store(self, tx, value: Variable) -> None:
        if self.source is not None:
            tx.side_effects.store_cell(self.source, value)
        elif self.real_cell is not None:  # a real cell the replay could not reach (read or not)
            unsupported("assigning a closure variable of a function that is not reachable from the inputs")
        self._lazy = None
        self._value = value


class FunctionVariable(Variable):
    """A Python function the interpreter inlines."""

    code: types.CodeType
    f_globals: dict

    def python_type(self):
        return types.FunctionType

    def truthy(self, tx):
        return True

    def default(self, tx, index: int) -> Variable:
        raise NotImplementedError

    def kwdefault(self, tx, name: str) -> Variable | None:
        raise NotImplementedError

    def closure_cells(self, tx) -> list:
        raise NotImplementedError

    def call(self, tx, args, kwargs):
        return tx.inline_call(self, list(args), dict(kwargs))

    def getattr(self, tx, name):
        if name == "__name__":
            return ConstantVariable(self.code.co_name)
        if name == "__qualname__":
            return ConstantVariable(getattr(self, "qualname", self.code.co_name))
        if name == "__code__":
            # Capture inlines this very code object, so reading it assumes nothing more.
            return ConstantVariable(self.code)
        if name == "__class__":
            # A function's type cannot be overridden: what ``type(fn)`` gives.
            from .objects import ClassVariable

            return ClassVariable(self.python_type())
        unsupported(f"attribute {name!r} of function {self.code.co_name}")


# functools.lru_cache / functools.cache wrappers (a C type).
CACHE_WRAPPER_TYPE = type(functools.lru_cache(maxsize=None)(lambda: None))


def cached_function_variable(tx, wrapper, source) -> "CachedFunctionVariable":
    """An lru_cache wrapper (its identity guarded; the function it holds is fixed with it)."""
    from ..sources import ConstSource

    fn = wrapper.__wrapped__
    if source is not None:
        tx.guards.identity(source, wrapper)
        source = ConstSource(fn, f"fn<{fn.__qualname__}>")
    return CachedFunctionVariable(wrapper, source)


class UserFunctionVariable(FunctionVariable):
    """A real function object (from a global, an attribute, a closure, ...)."""

    def __init__(self, fn: types.FunctionType, source=None):
        self.fn = fn
        self.code = fn.__code__
        self.f_globals = fn.__globals__
        self.qualname = fn.__qualname__
        self.source = source

    def identity_key(self):
        from .containers import IdentityKey

        if self.source is not None and guarded_by_code(self.fn):
            # Its identity is not guarded: `is` or a dict key on it would specialize silently.
            unsupported(f"identity of {self.fn.__qualname__}, a function made by each call")
        return IdentityKey(self, self.fn)

    def _child_source(self):
        from ..sources import ConstSource

        if self.source is None:
            return None
        if guarded_by_code(self.fn):  # read the call's own object
            return self.source
        return ConstSource(self.fn, f"fn<{self.fn.__qualname__}>")

    def default(self, tx, index):
        from ..sources import DefaultSource

        parent = self._child_source()
        value = self.fn.__defaults__[index]
        return tx.wrap(value, DefaultSource(parent, index) if parent else None)

    def kwdefault(self, tx, name):
        from ..sources import DefaultSource

        kwdefaults = self.fn.__kwdefaults__ or {}
        if name not in kwdefaults:
            return None
        parent = self._child_source()
        return tx.wrap(kwdefaults[name], DefaultSource(parent, name, kwonly=True) if parent else None)

    def getattr(self, tx, name):
        stored = tx.side_effects.attribute(self.fn, name)
        if stored is not None:
            return stored
        if name in FUNCTION_DATA_ATTRIBUTES or name in FUNCTION_METADATA or name in getattr(self.fn, "__dict__", {}):
            # __module__, __doc__, __defaults__ and what decorators store (__wrapped__, ...):
            # read from the function object and guarded through it.
            from ..sources import AttrSource

            try:
                value = getattr(self.fn, name)
            except AttributeError:
                return super().getattr(tx, name)
            return tx.wrap(value, AttrSource(self._child_source(), name) if self.source is not None else None)
        if not hasattr(types.FunctionType, name):
            # An attribute a decorator did not set (``hasattr(fn, "__wrapped__")``): absent,
            # and guarded as absent on this function.
            if self.source is not None:
                tx.guards.has_attr(self._child_source(), name, False)
            raise AttributeMissing(name)
        return super().getattr(tx, name)

    def setattr(self, tx, name, value):
        if self.source is None or hasattr(types.FunctionType, name):  # its slots: __name__, __code__, ...
            return super().setattr(tx, name, value)
        # An entry of its __dict__ (a counter, a tag a decorator keeps): a side effect on the
        # function object, replayed after the graph ran.
        tx.side_effects.store_attribute(self.fn, self.source, name, value)

    def closure_cells(self, tx):
        from ..sources import ClosureSource, ConstSource

        # A function the trace holds as a constant (a class's method, whose identity is
        # guarded there) has its cells read, guarded and written through that constant:
        # a nonlocal it counts in changes between calls.
        parent = self._child_source() or ConstSource(self.fn, f"fn<{self.fn.__qualname__}>")
        return [tx.cell_variable(cell, ClosureSource(parent, i, name))
                for i, (name, cell) in enumerate(zip(self.code.co_freevars, self.fn.__closure__ or ()))]

    def __repr__(self):
        return f"UserFunctionVariable({self.fn.__qualname__})"


class CachedFunctionVariable(UserFunctionVariable):
    """A call through an ``lru_cache`` / ``cache`` wrapper. Its function is traced, as a pure
    function (it writes no state: the cache's contract), for the value; the wrapper itself is
    called again after the graph with the same arguments, so its cache (its entries, their
    order and its statistics) is as eager leaves it. That needs arguments the entry can hand
    it as they were (constants, objects of the inputs) and a result that is the same whether
    cached or not (a constant, a tensor); other calls are left to CPython (a break)."""

    def __init__(self, wrapper, source=None):
        super().__init__(wrapper.__wrapped__, source)
        self.wrapper = wrapper

    def call(self, tx, args, kwargs):
        values = [*args, *kwargs.values()]
        if not all(_as_it_was(v) for v in values):
            unsupported(f"a call of lru_cache function {self.qualname} with arguments made in the trace "
                        "(its cache hashes them): CPython calls it")
        writes = tx.writes
        result = super().call(tx, args, kwargs)
        if tx.writes != writes:
            unsupported(f"lru_cache function {self.qualname} writes state: CPython calls it")
        from .tensor import TensorVariable

        if not (result.is_constant() or isinstance(result, TensorVariable)):
            unsupported(f"lru_cache function {self.qualname} returning {result} (the cached object itself): "
                        "CPython calls it")
        tx.side_effects.call_after(self.wrapper, list(args), dict(kwargs))
        return result

    def getattr(self, tx, name):
        if name in ("cache_info", "cache_clear", "cache_parameters"):
            return OpaqueCallableVariable(getattr(self.wrapper, name))  # the cache's state: CPython's call
        return super().getattr(tx, name)


def _as_it_was(value) -> bool:
    """A value the entry can pass on as the very object (or an equal constant)."""
    return value.is_constant() or (getattr(value, "source", None) is not None and hasattr(value, "identity_key"))


def guarded_by_code(fn) -> bool:
    """Functions defined inside functions are made anew by each call of their maker (or
    rebuilt at a graph break): read from the inputs, they are guarded by code and globals,
    and their defaults and cells are read from the object of each call."""
    return "<locals>" in fn.__qualname__ and compiled_original(fn) is None


class NestedFunctionVariable(FunctionVariable):
    """A function created by MAKE_FUNCTION during the trace (closures, lambdas, comprehensions)."""

    def __init__(self, code, f_globals, defaults: tuple, kwdefaults: dict, cells: list, qualname: str,
                 annotations=None):
        self.code = code
        self.f_globals = f_globals
        self.defaults = defaults
        self.kwdefaults = kwdefaults
        self.cells = cells
        self.qualname = qualname
        self.annotations = annotations  # a DictVariable, made on first read when the code has none
        # What the trace set on it: ``inner.__name__ = ...`` (as decorators do) and the
        # entries of its __dict__ (``inner.tag = ...``, ``__wrapped__``), in the order set.
        self.attrs: dict[str, Variable] = {}
        self.dict_entries = EntryTable()

    def getattr(self, tx, name):
        if name in self.attrs:
            return self.attrs[name]
        if name in self.dict_entries:
            return self.dict_entries[name]
        if name == "__dict__":
            view = DictVariable({})
            view.items = self.dict_entries  # the same table: writes through it are attribute writes
            return view
        if name == "__module__":
            return ConstantVariable(self.f_globals.get("__name__"))
        if name == "__doc__":  # the compiler puts a function's docstring (or None) first among its constants
            first = self.code.co_consts[0] if self.code.co_consts else None
            return ConstantVariable(first if isinstance(first, str) else None)
        if name == "__annotations__":
            if self.annotations is None:
                self.annotations = DictVariable({})
            return self.annotations
        if name == "__defaults__":
            return TupleVariable(list(self.defaults)) if self.defaults else NONE
        if name == "__type_params__" and hasattr(types.FunctionType, name):
            # Python 3.12+: a function made by a plain ``def`` has none (functools.wraps copies them)
            return TupleVariable([])
        if not hasattr(types.FunctionType, name):  # an attribute nothing set (``__wrapped__``)
            raise AttributeMissing(name)
        return super().getattr(tx, name)

    def setattr(self, tx, name, value):
        if name in ("__name__", "__qualname__") and not (value.is_constant() and type(value.as_constant()) is str):
            raise_in_user_code(TypeError, f"{name} must be set to a string object")
        if name == "__qualname__":
            self.qualname = value.as_constant()
        if name in FUNCTION_METADATA:
            self.attrs[name] = value
        elif name == "__annotations__" and isinstance(value, DictVariable):
            self.annotations = value
        elif name == "__type_params__" and hasattr(types.FunctionType, name):
            if not isinstance(value, TupleVariable):
                raise_in_user_code(TypeError, "__type_params__ must be set to a tuple")
            self.attrs[name] = value
        elif hasattr(types.FunctionType, name):  # __defaults__, __code__, __dict__, ...: slots surge does not model
            super().setattr(tx, name, value)
        else:
            self.dict_entries[name] = value

    def metadata(self) -> dict:
        """What a rebuilt function must be given: the attributes the trace set on it."""
        made = dict(self.attrs)
        if self.annotations is not None:
            made["__annotations__"] = self.annotations
        return {**made, **self.dict_entries}

    def default(self, tx, index):
        return self.defaults[index]

    def kwdefault(self, tx, name):
        return self.kwdefaults.get(name)

    def closure_cells(self, tx):
        return self.cells

    @property
    def n_defaults(self):
        return len(self.defaults)

    def __repr__(self):
        return f"NestedFunctionVariable({self.qualname})"


def defaults_count(fn: FunctionVariable) -> int:
    if isinstance(fn, UserFunctionVariable):
        return len(fn.fn.__defaults__ or ())
    return len(fn.defaults)


def bind_arguments(tx, fn: FunctionVariable, args: list, kwargs: dict) -> dict:
    """Map call arguments to the function's local variables, as CPython does."""
    code = fn.code
    nargs, nkwonly = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    posonly = code.co_posonlyargcount
    bound: dict[str, Variable] = {}
    for name, value in zip(names[:nargs], args):
        bound[name] = value
    extra_pos = args[nargs:]
    index = nargs + nkwonly
    if code.co_flags & CO_VARARGS:
        from .containers import TupleVariable

        bound[names[index]] = TupleVariable(extra_pos)
        index += 1
    elif extra_pos:
        unsupported(f"{code.co_name}() takes {nargs} positional arguments but {len(args)} were given")
    extra_kw = {}
    for key, value in kwargs.items():
        if key in names[posonly:nargs + nkwonly] and key not in bound:
            bound[key] = value
        elif key in bound:
            unsupported(f"{code.co_name}() got multiple values for argument {key!r}")
        else:
            extra_kw[key] = value
    if code.co_flags & CO_VARKEYWORDS:
        from .containers import DictVariable

        bound[names[index]] = DictVariable(extra_kw)
    elif extra_kw:
        unsupported(f"{code.co_name}() got an unexpected keyword argument {next(iter(extra_kw))!r}")
    ndefaults = defaults_count(fn)
    for i, name in enumerate(names[:nargs]):
        if name not in bound:
            d = i - (nargs - ndefaults)
            if d < 0:
                unsupported(f"{code.co_name}() missing required argument {name!r}")
            bound[name] = fn.default(tx, d)
    for name in names[nargs:nargs + nkwonly]:
        if name not in bound:
            value = fn.kwdefault(tx, name)
            if value is None:
                unsupported(f"{code.co_name}() missing required keyword-only argument {name!r}")
            bound[name] = value
    return bound


class UserMethodVariable(Variable):
    """A function bound to a symbolic ``self``."""

    def __init__(self, fn: FunctionVariable, self_var: Variable, source=None):
        self.fn = fn
        self.self_var = self_var
        self.source = source

    def python_type(self):
        return types.MethodType

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        return self.fn.call(tx, [self.self_var, *args], kwargs)

    def getattr(self, tx, name):
        if name == "__self__":
            return self.self_var
        if name == "__func__":
            return self.fn
        return self.fn.getattr(tx, name)


class GeneratorVariable(IteratorVariable):
    """A generator made by calling a generator function in the trace; runs as it is iterated."""

    def __init__(self, tx, frame, name: str | None = None, qualname: str | None = None):
        self.tx = tx
        self.frame = frame
        # As the function that made it was named when it was called; settable on the generator.
        self.names = {"__name__": name or frame.code.co_name,
                      "__qualname__": qualname or getattr(frame.code, "co_qualname", frame.code.co_name)}

    def python_type(self):
        return types.GeneratorType

    def setattr(self, tx, name, value):
        if name not in self.names:
            return super().setattr(tx, name, value)
        if not (value.is_constant() and type(value.as_constant()) is str):
            raise_in_user_code(TypeError, f"{name} must be set to a string object")
        self.names[name] = value.as_constant()

    def delattr(self, tx, name):
        if name in self.names:
            raise_in_user_code(TypeError, f"{name} must be set to a string object")
        return super().delattr(tx, name)

    def truthy(self, tx):
        return True

    # Whether the last next() ran the generator to its end (its StopIteration carries the
    # return value; later ones carry nothing).
    just_finished = False

    def next(self):
        was_done = self.frame.done
        value = self.frame.resume(self.tx.current_frame)
        self.just_finished = self.frame.done and not was_done
        return value

    def iterate(self, tx):
        values = []
        while (value := self.next()) is not None:
            values.append(value)
        return values

    def remaining(self):
        unsupported("a generator inside another iterator at a graph break")

    def getattr(self, tx, name):
        if name in ("send", "throw", "close"):
            return GeneratorMethodVariable(self, name)
        if name in self.names:
            return ConstantVariable(self.names[name])
        return super().getattr(tx, name)

    def send(self, value):
        if not self.frame.paused and not self.frame.done and not (value.is_constant() and value.as_constant() is None):
            raise_in_user_code(TypeError, "can't send non-None value to a just-started generator")
        was_done = self.frame.done
        result = self.frame.resume(self.tx.current_frame, value)
        self.just_finished = self.frame.done and not was_done
        return result

    def close(self):
        """``generator.close()``: GeneratorExit raised at the paused yield."""
        from .base import RaisedInUserCode
        from .exceptions import ExceptionVariable

        if self.frame.done or not self.frame.paused:
            self.frame.done = True
            return
        try:
            self.throw(ExceptionVariable(GeneratorExit, []))
        except RaisedInUserCode as raised:
            if issubclass(raised.exc_type, (GeneratorExit, StopIteration)):
                return
            raise
        if not self.frame.done:
            raise_in_user_code(RuntimeError, "generator ignored GeneratorExit")

    def throw(self, exc):
        """``generator.throw(exc)`` of an exception made in the trace."""
        from .base import RaisedInUserCode

        was_done = self.frame.done
        value = self.frame.throw(self.tx.current_frame, RaisedInUserCode(exc.exc_type, "", exc))
        self.just_finished = self.frame.done and not was_done
        return value


class GeneratorMethodVariable(Variable):
    """``send``, ``throw`` or ``close`` of a generator made in the trace."""

    def __init__(self, generator: GeneratorVariable, name: str):
        self.generator = generator
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        from .builtins import stop_iteration
        from .exceptions import ExceptionVariable, construct_exception
        from .objects import ClassVariable

        if kwargs or (self.name == "close") != (not args):
            unsupported(f"generator.{self.name}() with these arguments")
        if self.name == "close":
            self.generator.close()
            return NONE
        if self.name == "send":
            value = self.generator.send(args[0])
        else:
            exc = args[0] if len(args) == 1 else None
            if isinstance(exc, ClassVariable) and issubclass(exc.cls, BaseException):
                exc = construct_exception(tx, exc.cls, [], {})
            if not isinstance(exc, ExceptionVariable):
                unsupported("generator.throw() of anything but one exception")
            value = self.generator.throw(exc)
        if value is None:
            stop_iteration(self.generator)
        return value


class PartialVariable(Variable):
    """``functools.partial(fn, *args, **kwargs)`` made during the trace."""

    def __init__(self, fn: Variable, args: list, kwargs: dict):
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def python_type(self):
        import functools

        return functools.partial

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        return self.fn.call(tx, [*self.args, *args], {**self.kwargs, **kwargs})

    def getattr(self, tx, name):
        # CPython's partial holds them as members: the same objects on every read (a write
        # to ``keywords`` changes later calls).
        if name == "func":
            return self.fn
        if name == "args":
            if getattr(self, "_args", None) is None:
                self._args = TupleVariable(list(self.args))
            return self._args
        if name == "keywords":
            if getattr(self, "_keywords", None) is None:
                self._keywords = DictVariable({})
                self._keywords.items = self.kwargs
            return self._keywords
        return super().getattr(tx, name)


class TensorMethodVariable(Variable):
    def __init__(self, tensor, name: str):
        self.tensor = tensor
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        from .tensor import call_tensor_method

        return call_tensor_method(tx, self.tensor, self.name, list(args), dict(kwargs))


class OpaqueCallableVariable(Variable):
    """A callable of a trusted library that surge does not model (a numpy ufunc, a C
    function): it may be loaded and passed around, and calling it is a graph break."""

    def __init__(self, fn):
        self.fn = fn

    def python_type(self):
        return type(self.fn)

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        name = getattr(self.fn, "__qualname__", None) or getattr(self.fn, "__name__", type(self.fn).__qualname__)
        unsupported(f"call of {name} ({type(self.fn).__qualname__}), which surge does not model")


class OpaqueMethodVariable(Variable):
    """A C method of an object surge does not model (``array.sum``), bound to ``self_var``:
    calling it is a graph break, and the break code loads it again from the object."""

    def __init__(self, self_var, name: str, descriptor):
        self.self_var = self_var
        self.name = name
        self.descriptor = descriptor

    def python_type(self):
        return types.BuiltinMethodType

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        unsupported(f"call of {self.descriptor.__qualname__} ({type(self.descriptor).__qualname__}), "
                    "which surge does not model")


class BoundConstantMethod(Variable):
    """A method of an immutable Python value (``"a{}".format``, ``(1, 2).index``)."""

    def __init__(self, value, name: str):
        self.value = value
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        args = [materialized_list(tx, a) if isinstance(a, IteratorVariable) else a for a in args]
        if not all(a.is_constant() for a in args) or not all(v.is_constant() for v in kwargs.values()):
            unsupported(f"{type(self.value).__name__}.{self.name}() with non-constant arguments")
        a = [x.as_constant() for x in args]
        k = {n: v.as_constant() for n, v in kwargs.items()}
        try:
            result = getattr(self.value, self.name)(*a, **k)
        except Exception as e:
            unsupported(f"{type(self.value).__name__}.{self.name}() raised {type(e).__name__}: {e}")
        return tx.wrap(result, None)


def materialized_list(tx, iterator):
    from .containers import ListVariable

    return ListVariable(iterator.iterate(tx))


class ContainerMethodVariable(Variable):
    """A method of a symbolic list, tuple, dict or set; rules live in ``container_methods``."""

    def __init__(self, container, name: str):
        self.container = container
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        from .container_methods import call_container_method

        return call_container_method(tx, self.container, self.name, list(args), dict(kwargs))

