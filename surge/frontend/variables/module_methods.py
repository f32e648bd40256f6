"""nn.Module methods the trace answers itself: ``parameters()``, ``children()``,
``named_modules()``, ``items()``/``keys()``/``values()`` of containers (each a rule over an
``NNModuleVariable``, guarded as it reads the module's tables), and slices of a
Sequential/ModuleList."""
from __future__ import annotations

from .base import Variable
from .constant import ConstantVariable


class ModuleSliceVariable(Variable):
    """``seq[a:b]`` of a Sequential/ModuleList: iterable, and callable like a Sequential."""

    def __init__(self, modules: list):
        self.items = modules

    def iterate(self, tx):
        return list(self.items)

    def length(self, tx):
        return len(self.items)

    def getitem(self, tx, index):
        key = index.as_constant()
        return ModuleSliceVariable(self.items[key]) if isinstance(key, slice) else self.items[key]

    def call(self, tx, args, kwargs):
        (value,) = args
        for module in self.items:
            value = module.call(tx, [value], {})
        return value


# nn.Module base methods that are plain Python and safe to inline.
ALLOWED_MODULE_BASE_METHODS = {"forward", "_call_impl", "extra_repr", "_get_name"}


class ModuleMethodVariable(Variable):
    def __init__(self, module_var, name, rule):
        self.module_var = module_var
        self.name = name
        self.rule = rule

    def call(self, tx, args, kwargs):
        from .containers import IteratorVariable

        # nn.Module.parameters(), children(), ... are generators in eager.
        result = self.rule(tx, self.module_var, *args, **kwargs)
        return IteratorVariable(result.items) if self.name in GENERATOR_METHODS else result


def _module_children(tx, mv):
    from .containers import ListVariable

    return ListVariable(mv.submodules(tx))


def _module_named_children(tx, mv):
    from .containers import ListVariable, TupleVariable

    return ListVariable([TupleVariable([ConstantVariable(k), v])
                         for k, v in zip([k for k, m in mv.obj._modules.items() if m is not None], mv.submodules(tx))])


def _module_modules(tx, mv):
    from .containers import ListVariable

    out = [mv]
    for child in mv.submodules(tx):
        for m in _module_modules(tx, child).items:
            if all(m.obj is not seen.obj for seen in out):
                out.append(m)
    return ListVariable(out)


def _module_parameters(tx, mv, recurse=ConstantVariable(True)):
    from .containers import ListVariable

    return ListVariable([v for _, v in _named_tensors(tx, mv, "_parameters", recurse.as_constant())])


def _module_named_parameters(tx, mv, prefix=ConstantVariable(""), recurse=ConstantVariable(True)):
    from .containers import ListVariable, TupleVariable

    return ListVariable([TupleVariable([ConstantVariable(prefix.as_constant() + ("." if prefix.as_constant() else "") + k), v])
                         for k, v in _named_tensors(tx, mv, "_parameters", recurse.as_constant())])


def _module_buffers(tx, mv, recurse=ConstantVariable(True)):
    from .containers import ListVariable

    return ListVariable([v for _, v in _named_tensors(tx, mv, "_buffers", recurse.as_constant())])


def _named_tensors(tx, mv, table, recurse, prefix=""):
    out, seen = [], set()
    modules = [(prefix, mv)]
    if recurse:
        modules = []

        def walk(p, m):
            modules.append((p, m))
            for k, child in zip([k for k, c in m.obj._modules.items() if c is not None], m.submodules(tx)):
                walk(f"{p}{k}.", child)
        walk(prefix, mv)
    for p, m in modules:
        m.guard_members(tx, table)
        for k, t in m.obj.__dict__[table].items():
            if t is None:
                m.getattr_fallback(tx, k)  # guards that the entry is None
                continue
            if id(t) in seen:
                continue
            seen.add(id(t))
            out.append((p + k, m.getattr_fallback(tx, k)))
    return out


def _module_items(tx, mv):
    from .containers import ListVariable, TupleVariable

    return ListVariable([TupleVariable([ConstantVariable(k), v])
                         for k, v in zip(mv.obj._modules, mv.submodules(tx))])


def _module_keys(tx, mv):
    from .containers import ListVariable

    mv.guard_members(tx)
    return ListVariable([ConstantVariable(k) for k in mv.obj._modules])


def _module_values(tx, mv):
    from .containers import ListVariable

    return ListVariable(mv.submodules(tx))


def _module_named_modules(tx, mv, memo=None, prefix=ConstantVariable(""), remove_duplicate=ConstantVariable(True)):
    from .containers import ListVariable, TupleVariable

    out, seen = [], set()

    def walk(p, m):
        if id(m.obj) in seen:
            return
        seen.add(id(m.obj))
        out.append(TupleVariable([ConstantVariable(p), m]))
        for k, child in zip([k for k, c in m.obj._modules.items() if c is not None], m.submodules(tx)):
            walk(f"{p}.{k}" if p else k, child)
    walk(prefix.as_constant(), mv)
    return ListVariable(out)


MODULE_METHOD_RULES = {
    "named_modules": _module_named_modules,
    "children": _module_children,
    "named_children": _module_named_children,
    "modules": _module_modules,
    "parameters": _module_parameters,
    "named_parameters": _module_named_parameters,
    "buffers": _module_buffers,
}
GENERATOR_METHODS = {"named_modules", "children", "named_children", "modules", "parameters", "named_parameters", "buffers"}
CONTAINER_MODULE_RULES = {"items": _module_items, "keys": _module_keys, "values": _module_values}
for _name, _rule in CONTAINER_MODULE_RULES.items():
    MODULE_METHOD_RULES.setdefault(_name, _rule)
