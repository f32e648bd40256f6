"""nn.Modules built inside the captured frame (``nn.CrossEntropyLoss()`` in a model's
head, ``nn.Softmax(dim)``, a user module made on each call).

A module's whole state is its instance ``__dict__``: ``nn.Module.__init__`` fills it
with ``training`` and the tables (``_parameters``, ``_buffers``, ``_modules``, the hook
dicts), and ``nn.Module.__setattr__`` sorts later attributes into it. A
``FrameModuleVariable`` is a ``NewObjectVariable`` whose attributes model that dict:
the class's own ``__init__`` is traced as Python, the base methods it reaches are the
rules below, and when the module escapes (returned, stored, live at a graph break)
``new_object`` rebuilds a real module from the same dict. Building one records
nothing in the graph. A Parameter made in the frame is not captured (eager makes fresh
random weights on every call): that construction is a graph break.
"""
from __future__ import annotations

import types

import torch

from .base import AttributeMissing, Variable, raise_in_user_code, unsupported
from .constant import NONE, ConstantVariable
from .containers import DictVariable, SetVariable
from .objects import _MISSING, NNModuleVariable, NewObjectVariable, bind_class_attribute, static_lookup, static_owner

_TABLES = ("_parameters", "_buffers", "_modules")


def _bare_module_state() -> dict:
    """The instance dict ``nn.Module.__init__`` makes on this torch version."""
    probe = torch.nn.Module.__new__(torch.nn.Module)
    torch.nn.Module.__init__(probe)
    return probe.__dict__


def _as_variable(value):
    if isinstance(value, dict) and not value:
        return DictVariable({}, cls=type(value))
    if type(value) is set and not value:
        return SetVariable({})
    if value is None or isinstance(value, bool):
        return ConstantVariable(value)
    unsupported(f"nn.Module state of type {type(value).__name__} in a module built in compiled code")


def construct_module(tx, cls: type, args: list, kwargs: dict) -> "FrameModuleVariable":
    hooks = torch.nn.modules.module
    if hooks._global_module_registration_hooks or hooks._global_buffer_registration_hooks \
            or hooks._global_parameter_registration_hooks:
        unsupported("global nn.Module registration hooks are registered")
    if type(cls).__call__ is not type.__call__ or cls.__new__ is not object.__new__:
        unsupported(f"constructing {cls.__qualname__} (custom __new__ or metaclass __call__) in compiled code")
    module = FrameModuleVariable(cls)
    init = static_lookup(cls, "__init__")
    if init is torch.nn.Module.__init__:
        module_init(tx, module, *args, **kwargs)
    elif isinstance(init, types.FunctionType):
        bind_class_attribute(tx, module, cls, "__init__", init).call(tx, args, kwargs)
    else:
        unsupported(f"{cls.__qualname__}.__init__ is not Python code")
    return module


def module_init(tx, module: "FrameModuleVariable", *args, **kwargs):
    if args or kwargs or module.cls.call_super_init:
        # With call_super_init, nn.Module.__init__ goes on to the next __init__ in the
        # MRO (a mixin's), with these arguments: not modelled.
        unsupported("nn.Module.__init__ with arguments or call_super_init in compiled code")
    for name, value in _bare_module_state().items():
        module.attrs[name] = _as_variable(value)
    return NONE


def _check_new_name(module, name, table: str) -> str:
    """The checks nn.Module's register_* methods make before adding ``name`` to ``table``."""
    key = name.as_constant()
    what = {"_buffers": "buffer", "_modules": "module", "_parameters": "parameter"}[table]
    if not isinstance(key, str):
        raise_in_user_code(TypeError, f"{what} name should be a string. Got {type(key).__name__}")
    if "." in key or not key:
        raise_in_user_code(KeyError, f"{what} name can't contain \".\" or be empty")
    known = key in module.attrs or static_lookup(module.cls, key) is not _MISSING or any(
        key in module.table(t).items for t in _TABLES)
    if known and key not in module.table(table).items:
        raise_in_user_code(KeyError, f"attribute '{key}' already exists")
    return key


def _register_buffer(tx, module, name, tensor, persistent=ConstantVariable(True)):
    _check_tensor_or_none(tensor, "buffer")
    key = _check_new_name(module, name, "_buffers")
    module.table("_buffers").items[key] = tensor
    names = module.attrs["_non_persistent_buffers_set"]
    if persistent.as_constant():
        names.items.pop(key, None)
    else:
        names.items[key] = ConstantVariable(key)
    return NONE


def _register_module(tx, module, name, child):
    if not (isinstance(child, (NNModuleVariable, FrameModuleVariable)) or child.is_constant()
            and child.as_constant() is None):
        raise_in_user_code(TypeError, f"{child} is not a Module subclass")
    module.table("_modules").items[_check_new_name(module, name, "_modules")] = child
    return NONE


def _register_parameter(tx, module, name, param):
    if not (param.is_constant() and param.as_constant() is None):
        unsupported("registering a Parameter on a module built in compiled code")
    module.table("_parameters").items[_check_new_name(module, name, "_parameters")] = param
    return NONE


def _train(tx, module, mode=ConstantVariable(True)):
    flag = mode.as_constant()
    if not isinstance(flag, bool):
        raise_in_user_code(ValueError, "training mode is expected to be boolean")
    module.attrs["training"] = ConstantVariable(flag)
    for child in module.table("_modules").items.values():
        if isinstance(child, FrameModuleVariable):
            child.getattr(tx, "train").call(tx, [ConstantVariable(flag)], {})  # its own train() if it has one
        elif not child.is_constant():
            unsupported("train()/eval() of a module built in compiled code that holds a module from the inputs")
    return module


def _eval(tx, module):
    return module.getattr(tx, "train").call(tx, [ConstantVariable(False)], {})


def _check_tensor_or_none(value, what: str) -> None:
    from .tensor import TensorVariable

    if isinstance(value, TensorVariable) or value.is_constant() and value.as_constant() is None:
        return
    raise_in_user_code(TypeError, f"cannot assign {value} as {what} (torch.Tensor or None expected)")


def _module_setattr(tx, module, name, value):
    module.module_setattr(name.as_constant(), value)
    return NONE


# nn.Module base methods a module built in the frame answers with a rule.
MODULE_BASE_RULES = {
    "__init__": module_init,
    "__setattr__": _module_setattr,
    "register_buffer": _register_buffer,
    "register_module": _register_module,
    "add_module": _register_module,
    "register_parameter": _register_parameter,
    "train": _train,
    "eval": _eval,
}
# nn.Module base methods that are plain Python and read only what the rules keep.
_INLINED_BASE_METHODS = {"forward", "extra_repr", "_get_name"}


class BoundModuleRule(Variable):
    """A rule of MODULE_BASE_RULES bound to a module built in the frame."""

    def __init__(self, module: "FrameModuleVariable", rule):
        self.module = module
        self.rule = rule

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        return self.rule(tx, self.module, *args, **kwargs)


def base_method(tx, module: "FrameModuleVariable", name: str):
    """``nn.Module.<name>`` bound to ``module`` (``super().__init__()``, ``self.register_buffer``)."""
    if name in MODULE_BASE_RULES:
        return BoundModuleRule(module, MODULE_BASE_RULES[name])
    if name in _INLINED_BASE_METHODS:
        return bind_class_attribute(tx, module, module.cls, name, torch.nn.Module.__dict__[name])
    return BoundModuleRule(module, _refused(name))


def _refused(name: str):
    # Refused when called, not when loaded: the break then hands the whole call to CPython.
    def rule(tx, module, *args, **kwargs):
        unsupported(f"nn.Module.{name}() on a module built in compiled code")
    return rule


class FrameModuleVariable(NewObjectVariable):
    """An nn.Module the trace built; its ``attrs`` are the module's instance dict."""

    def table(self, name: str) -> DictVariable:
        table = self.attrs.get(name)
        if not isinstance(table, DictVariable):
            raise_in_user_code(AttributeError, f"cannot assign before Module.__init__() call ({name} missing)")
        return table

    def module_base_method(self, tx, name: str):
        """``super().<name>`` resolved to nn.Module (``super().__init__()``)."""
        return base_method(tx, self, name)

    def generic_getattr(self, tx, name):
        if static_owner(self.cls, name) is torch.nn.Module and name not in self.attrs:
            if isinstance(torch.nn.Module.__dict__[name], types.FunctionType):
                return base_method(tx, self, name)
        try:
            return super().generic_getattr(tx, name)
        except AttributeMissing:
            pass
        # nn.Module.__getattr__: the tables, after the instance dict and the class.
        for table in _TABLES:
            items = self.attrs.get(table)
            if isinstance(items, DictVariable) and name in items.items:
                return items.items[name]
        raise AttributeMissing(name)

    def setattr(self, tx, name, value):
        if static_lookup(self.cls, "__setattr__") is torch.nn.Module.__setattr__:
            self.module_setattr(name, value)
            return
        super().setattr(tx, name, value)  # the class's own __setattr__, traced

    def module_setattr(self, name: str, value) -> None:
        """``nn.Module.__setattr__``: modules, buffers and parameters go to their table."""
        from .tensor import TensorVariable

        if isinstance(value, TensorVariable) and issubclass(value.python_type(), torch.nn.Parameter):
            unsupported("assigning a Parameter to a module built in compiled code")
        if isinstance(value, (NNModuleVariable, FrameModuleVariable)):
            modules = self.table("_modules")
            self.attrs.pop(name, None)
            for table in ("_parameters", "_buffers"):
                self.attrs[table].items.pop(name, None)
            modules.items[name] = value
            return
        for table in _TABLES:
            items = self.attrs.get(table)
            if isinstance(items, DictVariable) and name in items.items:
                if table == "_buffers":
                    _check_tensor_or_none(value, "buffer")
                elif not (value.is_constant() and value.as_constant() is None):
                    unsupported(f"assigning {value} to {table[1:-1]} {name!r} of a module built in compiled code")
                items.items[name] = value
                return
        self.attrs[name] = value

    def call(self, tx, args, kwargs):
        hooks = torch.nn.modules.module
        if hooks._global_forward_hooks or hooks._global_forward_pre_hooks or hooks._global_backward_hooks \
                or hooks._global_backward_pre_hooks:
            unsupported("global nn.Module hooks are registered")
        # Its own hook dicts stay empty: registering hooks is not one of the base rules.
        if "forward" in self.attrs:
            return self.attrs["forward"].call(tx, args, kwargs)
        forward = static_lookup(self.cls, "forward")
        if not isinstance(forward, types.FunctionType):
            unsupported(f"{self.cls.__qualname__} has no Python forward")
        return bind_class_attribute(tx, self, self.cls, "forward", forward).call(tx, args, kwargs)

    def __repr__(self):
        return f"FrameModuleVariable({self.cls.__qualname__})"
