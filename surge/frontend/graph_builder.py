"""The FX graph under construction for one captured frame.

Graph inputs are placeholders keyed by the source they are read from (one per
source); every op runs on meta tensors right away to learn its result's
metadata, stored on the node as ``meta["val"]`` together with the real device,
and the user's file:line as ``meta["stack_trace"]``.
"""
from __future__ import annotations

import torch
import torch.fx

from ..errors import Unsupported
from . import meta as meta_utils
from .sources import Source


class GraphBuilder:
    def __init__(self):
        self.graph = torch.fx.Graph()
        # (source, real tensor) per placeholder, in graph-input order.
        self.inputs: list[tuple[Source, torch.Tensor]] = []
        self._placeholder_by_source: dict[Source, torch.fx.Node] = {}
        self._last_placeholder: torch.fx.Node | None = None
        # Subgraphs that get_attr nodes name (the branches of torch.cond).
        self.submodules: dict[str, torch.fx.GraphModule] = {}
        # Expression -> the node computing a symbolic size (frontend/dynamic_dims.py).
        self.symbolic_nodes: dict = {}

    def placeholder(self, source: Source, real, name_hint: str, meta=None) -> torch.fx.Node:
        """The graph input read from ``source``; ``meta`` (a meta tensor with symbolic sizes,
        or a SymInt) stands for ``real`` when given."""
        node = self._placeholder_by_source.get(source)
        if node is not None:
            return node
        name = "".join(ch if ch.isalnum() else "_" for ch in name_hint.lower()).strip("_") or "input"
        if self._last_placeholder is None:
            first = next(iter(self.graph.nodes), None)
            ctx = self.graph.inserting_before(first) if first is not None else self.graph.inserting_after()
        else:
            ctx = self.graph.inserting_after(self._last_placeholder)
        with ctx:
            node = self.graph.placeholder(name)
        node.meta["val"] = meta_utils.to_meta(real) if meta is None else meta
        if isinstance(real, torch.Tensor):
            node.meta["device"] = real.device
        node.meta["source"] = source.name()
        self._last_placeholder = node
        self._placeholder_by_source[source] = node
        self.inputs.append((source, real))
        return node

    def create_node(self, kind: str, target, args: tuple, kwargs: dict, stack_trace: str):
        node = self.graph.create_node(kind, target, args, kwargs)
        node.meta["stack_trace"] = stack_trace
        return node

    def output(self, nodes: list[torch.fx.Node]) -> None:
        self.graph.output(tuple(nodes))

    def graph_module(self) -> torch.fx.GraphModule:
        self.graph.lint()
        root = torch.nn.Module()
        for name, module in self.submodules.items():
            root.add_module(name, module)
        return torch.fx.GraphModule(root, self.graph, class_name="SurgeGraph")


def run_on_meta(kind: str, target, margs: tuple, mkwargs: dict):
    """Run one op on meta values; a failure means eager would fail or the op is data-dependent."""
    try:
        if kind == "call_method":
            return getattr(margs[0], target)(*margs[1:], **mkwargs)
        return target(*margs, **mkwargs)
    except Unsupported:
        raise
    except NotImplementedError as e:
        raise Unsupported(f"{_name(target)} has no metadata rule (likely data-dependent): {_first_line(e)}")
    except Exception as e:
        raise Unsupported(f"{_name(target)} raised {type(e).__name__}: {_first_line(e)}")


def _name(target) -> str:
    if isinstance(target, str):
        return f"Tensor.{target}"
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""
