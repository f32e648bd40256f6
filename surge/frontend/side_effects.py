"""Side effects on state outside the frame, replayed by the generated entry.

When captured code writes to something that outlives the call — a closure
variable, a global, an attribute of an input object or module, an input list or
dict — the trace keeps the new value (later reads in the same trace see it)
and the entry function performs the same writes after the graph runs, so the
caller observes what eager would have done.
"""
from __future__ import annotations

import torch

from .sources import Source
from .variables.containers import key_variable
from .variables.hashing import check_rebuilt


class SideEffects:
    def __init__(self):
        self._containers: dict[int, object] = {}          # id(variable) -> mutated input list/dict
        self._stores: dict[tuple, tuple] = {}             # key -> (kind, source, name, value)
        self._attributes: dict[tuple, object] = {}        # (id(obj), name) -> value, for reads
        self._calls: list[tuple] = []                     # (callable, args, kwargs) called after the graph

    # ---- recording --------------------------------------------------------------

    def mutate_container(self, var) -> None:
        self._containers.setdefault(id(var), var)

    def store_cell(self, source: Source, value) -> None:
        self._stores[("cell", source)] = ("cell", source, None, value)

    def store_global(self, source: Source, value) -> None:
        self._stores[("global", source)] = ("global", source, None, value)

    def store_attribute(self, obj, source: Source, name: str, value) -> None:
        self._stores[("attr", source, name)] = ("attr", source, name, value)
        self._attributes[(id(obj), name)] = value

    def call_after(self, fn, args: list, kwargs: dict) -> None:
        """``fn(*args, **kwargs)`` after the graph, in order (an lru_cache wrapper: its cache)."""
        self._calls.append((fn, args, kwargs))

    def set_default_device(self, device) -> None:
        """``torch.set_default_device(device)`` in the frame (the last one is what stays)."""
        self._stores[("default_device",)] = ("default_device", None, None, device)

    def replays(self, var) -> bool:
        """Whether the entry writes the trace's changes back into this input container."""
        return id(var) in self._containers

    def attribute(self, obj, name: str):
        """The value the trace itself stored into ``obj.name``, if any."""
        return self._attributes.get((id(obj), name))

    def global_value(self, source: Source):
        found = self._stores.get(("global", source))
        return found[3] if found is not None else None

    # ---- replay -----------------------------------------------------------------

    def values(self) -> list:
        """Every symbolic value the replay writes (their tensors must be graph outputs)."""
        out = [v for _, _, _, v in self._stores.values()]
        for var in self._containers.values():
            if _only_appended(var):
                out.extend(var.appended)
            else:
                out.extend(var.items.values() if isinstance(var.items, dict) else var.items)
        for _, args, kwargs in self._calls:
            out.extend([*args, *kwargs.values()])
        return out

    def statements(self, codegen, expr) -> list[str]:
        lines = []
        for var in self._containers.values():
            target = codegen.value_of(var.source)
            if _only_appended(var):  # its items were never read, nor guarded: added to, not replaced
                lines.append(f"{target}.extend([{', '.join(expr(v) for v in var.appended)}])")
            elif isinstance(var.items, dict):
                check_rebuilt(var.items)
                body = ", ".join(f"{expr(key_variable(k))}: {expr(v)}" for k, v in var.items.items())
                lines += [f"new_items = {{{body}}}", f"{target}.clear()", f"{target}.update(new_items)"]
            else:
                lines.append(f"{target}[:] = [{', '.join(expr(v) for v in var.items)}]")
        for kind, source, name, value in self._stores.values():
            if kind == "cell":
                parent = codegen.value_of(source.parent)
                lines.append(f"{parent}.__closure__[{source.index}].cell_contents = {expr(value)}")
            elif kind == "global":
                lines.append(f"{source.expr(None, codegen.consts)} = {expr(value)}")
            elif kind == "default_device":
                set_default = codegen.consts.ref(torch.set_default_device, "set_default_device")
                lines.append(f"{set_default}({expr(value)})")
            else:
                lines.append(f"setattr({codegen.value_of(source)}, {name!r}, {expr(value)})")
        for fn, args, kwargs in self._calls:
            arguments = [expr(a) for a in args] + [f"{k}={expr(v)}" for k, v in kwargs.items()]
            lines.append(f"{codegen.consts.ref(fn, getattr(fn, '__name__', 'fn'))}({', '.join(arguments)})")
        return lines

    def __bool__(self):
        return bool(self._containers or self._stores or self._calls)


def _only_appended(var) -> bool:
    return getattr(var, "is_unread", None) is not None and var.is_unread()
