"""Exception objects made, raised or caught by the captured code.

An exception is modelled as CPython builds one: ``BaseException.__new__`` keeps every
positional argument as ``args``, then ``__init__`` runs — a Python ``__init__`` of a
user class is traced (``super().__init__(msg)`` resets ``args``, ``self.code = code``
sets an attribute), the built-in one sets ``args`` and the C fields of its class
(``StopIteration.value``, ``ImportError.name``, ``OSError.errno``). Attributes set on
the instance later (``e.extra = 1``) are kept too.

Besides that, an exception carries its chain as Python sets it: ``raise X from Y``
sets ``__cause__`` (and ``__suppress_context__``), and raising while another
exception is handled sets ``__context__`` to that one. Code that reads them sees what
eager Python would show, and an exception rebuilt for CPython at a graph break
(breaks.py, ``rebuild_exception``) gets the same arguments, attributes and chain.

What depends on the C fields or on a built-in ``__str__`` (``str(e)``, ``e.value``,
``e.errno``) is answered by a real exception built from the same constants.
"""
from __future__ import annotations

import types

from .base import AttributeMissing, RaisedInUserCode, Variable, raise_in_user_code, unsupported
from .constant import NONE, ConstantVariable

# Names Python keeps on every exception, answered from the model itself.
_CHAIN_NAMES = ("__cause__", "__context__", "__suppress_context__")


def builtin_base(cls: type) -> type:
    """The first built-in exception class of ``cls``'s MRO: the one whose C code
    makes and initialises the instance."""
    return next(k for k in cls.__mro__ if k.__module__ == "builtins")


def _python_hook(cls: type, name: str):
    """``name`` as a Python function defined by a user class of ``cls``'s MRO, or None."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            value = klass.__dict__[name]
            return value if isinstance(value, types.FunctionType) else None
    return None


class ExceptionVariable(Variable):
    """An exception object made or caught by the captured code."""

    def __init__(self, exc_type: type, args: list, init_kwargs: dict | None = None):
        self.exc_type = exc_type
        self.args = list(args)
        # What the built-in __init__ was called with: it sets the C fields.
        self.init_args = list(args)
        self.init_kwargs = dict(init_kwargs or {})
        self.attrs: dict[str, Variable] = {}
        self.cause: Variable = NONE
        self.context: Variable = NONE
        self.suppress_context = False

    def python_type(self):
        return self.exc_type

    def truthy(self, tx):
        return True

    def has_chain(self) -> bool:
        return self.cause is not NONE or self.context is not NONE or self.suppress_context

    def is_plain(self) -> bool:
        """Rebuilt exactly by calling its class with its args."""
        return not self.attrs and not self.init_kwargs and self.init_args == self.args \
            and _python_hook(self.exc_type, "__init__") is None

    def set_cause(self, cause: Variable) -> None:
        """``raise self from cause`` (cause: an exception, or None)."""
        if not (isinstance(cause, ExceptionVariable) or cause.is_constant() and cause.as_constant() is None):
            unsupported(f"exception cause {cause} (must be an exception or None)")
        self.cause = cause
        self.suppress_context = True

    def raised_while_handling(self, handled: "ExceptionVariable | None") -> None:
        """Python sets ``__context__`` when an exception is raised inside a handler."""
        if handled is not None and handled is not self and self.context is NONE:
            self.context = handled

    def builtin_init(self, args: list, kwargs: dict) -> None:
        """The built-in ``__init__`` of the exception's class, called with these arguments."""
        if kwargs:
            if not all(a.is_constant() for a in [*args, *kwargs.values()]):
                unsupported(f"{self.exc_type.__name__}() with keyword arguments that are not constants")
            try:  # the built-in __init__ decides which keywords it takes
                self.real_instance(args, {k: v.as_constant() for k, v in kwargs.items()})
            except (TypeError, ValueError) as e:
                raise_in_user_code(type(e), str(e))
        self.args = list(args)
        self.init_args = list(args)
        self.init_kwargs = dict(kwargs)

    def real_instance(self, init_args=None, init_kwargs=None) -> BaseException:
        """A real exception with this one's constant arguments and attributes."""
        if init_args is None:
            init_args = self.init_args
        if init_kwargs is None:
            init_kwargs = {k: v.as_constant() for k, v in self.init_kwargs.items()}
        values = [*self.args, *init_args, *self.attrs.values()]
        if not all(v.is_constant() for v in values):
            unsupported(f"{self.exc_type.__name__} with arguments that are not Python constants")
        return rebuild_exception(self.exc_type, tuple(a.as_constant() for a in self.args),
                                 tuple(a.as_constant() for a in init_args), init_kwargs,
                                 {k: v.as_constant() for k, v in self.attrs.items()})

    def getattr(self, tx, name):
        if name in self.attrs:
            return self.attrs[name]
        if name == "args":
            from .containers import TupleVariable

            return TupleVariable(self.args)
        if name == "__cause__":
            return self.cause
        if name == "__context__":
            return self.context
        if name == "__suppress_context__":
            return ConstantVariable(self.suppress_context)
        if name == "__class__":
            from .objects import ClassVariable

            return ClassVariable(self.exc_type)
        if name in ("__traceback__", "with_traceback", "__notes__", "add_note", "__dict__"):
            unsupported(f"{name} of an exception in compiled code")
        from .objects import _MISSING, bind_class_attribute, static_lookup

        value = static_lookup(self.exc_type, name)
        if value is _MISSING:
            raise AttributeMissing(name)
        owner = next(k for k in self.exc_type.__mro__ if name in k.__dict__)
        if owner.__module__ == "builtins":
            # A C field (StopIteration.value, OSError.errno) or method of a built-in class.
            if isinstance(value, (types.MemberDescriptorType, types.GetSetDescriptorType)):
                return tx.wrap(getattr(self.real_instance(), name), None)
            unsupported(f"{owner.__name__}.{name} of an exception in compiled code")
        return bind_class_attribute(tx, self, self.exc_type, name, value)

    def setattr(self, tx, name, value):
        if name == "__cause__":
            self.set_cause(value)
        elif name == "__context__":
            self.context = value
        elif name == "__suppress_context__" and value.is_constant():
            self.suppress_context = bool(value.as_constant())
        elif name == "args":
            self.args = list(value.iterate(tx))
        elif name.startswith("__") or _python_hook(self.exc_type, "__setattr__") is not None:
            unsupported(f"setting attribute {name!r} of an exception in compiled code")
        else:
            self.attrs[name] = value

    def str_or_repr(self, tx, fn) -> Variable:
        """``str(e)`` / ``repr(e)``: a Python ``__str__``/``__repr__`` of the class is
        traced; the built-in ones are asked of a real exception with the same contents."""
        hook = _python_hook(self.exc_type, f"__{fn.__name__}__")
        if hook is not None:
            from .objects import bind_class_attribute

            return bind_class_attribute(tx, self, self.exc_type, f"__{fn.__name__}__", hook).call(tx, [], {})
        if (fn is str and self.exc_type.__str__ is BaseException.__str__
                or fn is repr and self.exc_type.__repr__ is BaseException.__repr__) \
                and all(a.is_constant() for a in self.args):
            # They read args and the class's name only (also for a class with a Python __init__).
            text = fn(BaseException(*[a.as_constant() for a in self.args]))
            return ConstantVariable(text if fn is str else self.exc_type.__name__ + text[len("BaseException"):])
        return ConstantVariable(fn(self.real_instance()))

    def __repr__(self):
        return f"ExceptionVariable({self.exc_type.__name__})"


def construct_exception(tx, cls: type, args: list, kwargs: dict) -> ExceptionVariable:
    """``cls(*args, **kwargs)`` for an exception class, as CPython runs it."""
    if _python_hook(cls, "__new__") is not None or type(cls) is not type:
        unsupported(f"constructing {cls.__qualname__} (its own __new__ or metaclass) in compiled code")
    if issubclass(cls, BaseExceptionGroup):
        cls = _exception_group_class(cls, args, kwargs)
    exc = ExceptionVariable(cls, args)  # BaseException.__new__ keeps every positional argument
    init = _python_hook(cls, "__init__")
    if init is not None:
        from .objects import bind_class_attribute

        bind_class_attribute(tx, exc, cls, "__init__", init).call(tx, list(args), dict(kwargs))
    elif builtin_base(cls) is OSError and len(args) >= 2:
        unsupported("OSError with an errno (CPython picks its subclass from the number)")
    else:
        exc.builtin_init(list(args), dict(kwargs))
    return exc


def _exception_group_class(cls: type, args: list, kwargs: dict) -> type:
    """The class ``BaseExceptionGroup.__new__`` makes (``BaseExceptionGroup`` of Exceptions
    only is an ``ExceptionGroup``), or its TypeError/ValueError: its checks run on stand-ins
    with the arguments' types (a bare instance of each nested exception's class)."""
    from .containers import ListVariable, TupleVariable

    def stand_in(value):
        if isinstance(value, ExceptionVariable):
            return value.exc_type.__new__(value.exc_type)
        if value.is_constant():
            return value.as_constant()
        cls_value = getattr(value, "cls", None)
        return cls_value if isinstance(cls_value, type) and value.python_type() is type else object()

    real = [stand_in(a) for a in args]
    if len(args) > 1 and isinstance(args[1], (ListVariable, TupleVariable)):
        items = [stand_in(v) for v in args[1].items]
        real[1] = items if isinstance(args[1], ListVariable) else tuple(items)
    try:
        made = cls.__new__(cls, *real, **{k: stand_in(v) for k, v in kwargs.items()})
    except (TypeError, ValueError) as e:
        raise_in_user_code(type(e), str(e))
    return type(made)


class ExceptionInitVariable(Variable):
    """The built-in ``__init__`` of an exception class, bound to an exception made in the
    trace (``super().__init__(message)`` in a user exception's ``__init__``)."""

    def __init__(self, exc: ExceptionVariable):
        self.exc = exc

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        self.exc.builtin_init(list(args), dict(kwargs))
        return NONE


def rebuild_exception(cls, args: tuple, init_args: tuple, init_kwargs: dict, attrs: dict) -> BaseException:
    """An exception made as the trace made it: built by its class's C code from the
    arguments its built-in ``__init__`` saw, with the ``args`` and attributes the
    traced code left on it (no Python ``__init__`` runs a second time)."""
    base = builtin_base(cls)
    exc = base.__new__(cls, *init_args)
    base.__init__(exc, *init_args, **init_kwargs)
    exc.args = args
    for name, value in attrs.items():
        setattr(exc, name, value)
    return exc


def exception_of(tx, raised) -> ExceptionVariable:
    """The exception object of a ``RaisedInUserCode``: the one the code raised, or one
    made for an error an operation raised (a KeyError of a dict lookup), with the
    exception being handled as its ``__context__``."""
    if raised.exception is not None:
        return raised.exception
    from .containers import key_variable

    if raised.exc_args is not None:
        args = [key_variable(a) for a in raised.exc_args]
    else:
        args = [ConstantVariable(raised.message)] if raised.message else []
    exc = ExceptionVariable(raised.exc_type, args)
    handled = tx.handled_exceptions
    exc.raised_while_handling(handled[-1] if handled else None)
    raised.exception = exc
    return exc


def raise_name_error(tx, name: str):
    """CPython's NameError for a missing global (its ``name`` set), chained to the exception
    being handled."""
    message = f"name {name!r} is not defined"
    exc = construct_exception(tx, NameError, [ConstantVariable(message)], {"name": ConstantVariable(name)})
    handled = tx.handled_exceptions
    exc.raised_while_handling(handled[-1] if handled else None)
    raise RaisedInUserCode(NameError, message, exception=exc)


def with_chain(exc: BaseException, cause, context, suppress_context: bool) -> BaseException:
    """``exc`` with the chain the trace gave it (an exception rebuilt at a graph break)."""
    exc.__context__ = context
    exc.__cause__ = cause
    exc.__suppress_context__ = suppress_context
    return exc


def exc_info(tx) -> Variable:
    """``sys.exc_info()`` inside a handler of the captured code."""
    from .containers import TupleVariable
    from .objects import ClassVariable

    exc = handled_exception(tx)
    return TupleVariable([ClassVariable(exc.exc_type), exc, TracebackVariable()])


def handled_exception(tx) -> ExceptionVariable:
    """The exception being handled (``sys.exception()``). Outside the trace's own handlers
    it is whatever the caller is handling, which the trace cannot know: CPython answers."""
    handled = tx.handled_exceptions
    if not handled or not isinstance(handled[-1], ExceptionVariable):
        unsupported("sys.exc_info() outside an exception handler of the compiled code")
    return handled[-1]


class TracebackVariable(Variable):
    """The traceback of ``sys.exc_info()``: the trace has no frames to show, so any use
    of it is left to CPython."""

    def python_type(self):
        return types.TracebackType

    def truthy(self, tx):
        return True
