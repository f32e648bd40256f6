"""Attention masks that are the causal pattern become ``is_causal=True``.

A model that builds its causal mask from ``arange``s and hands it to
``scaled_dot_product_attention`` as ``attn_mask`` (transformers' GPT-2 and Llama
do so whenever they are compiled: the check that would let them pass
``is_causal=True`` reads tensor values, which they avoid while compiling) makes
every attention call read a ``[batch, heads, q, kv]`` bias and compute the
masked-out half of the scores. With ``is_causal=True`` the fused attention kernels
skip the blocks above the diagonal and read no mask: on an H200, GPT-2's attention
forward and backward take about half the time.

The mask depends on no graph input (only on constants and static sizes), so its
value is known when compiling: this pass evaluates it on the example device and,
when it is exactly the pattern ``is_causal`` stands for (``tril(ones(q, kv))``
as booleans, or 0 / -inf as an additive float mask, the same for every batch and
head), rewrites the call. The mask's nodes are left to dead-code elimination.
It runs on the torch-level graph before tracing, so the forward and the backward
traced from it agree.
"""
from __future__ import annotations

import operator

import torch
import torch.fx

from .. import logs

_SDPA = (torch.nn.functional.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
# sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)
_MASK, _IS_CAUSAL = 3, 5
# masks larger than this are not evaluated ahead of time (memory on the device while compiling)
MAX_MASK_ELEMENTS = 1 << 28


def use_causal_attention(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with its attention calls whose mask is the causal pattern using ``is_causal=True``:
    a copy when there are such calls (``gm`` itself, the frontend's graph, is left as it
    is), else ``gm``."""
    calls = causal_attention_calls(gm)
    if not calls:
        return gm
    copy, nodes = graph_module_copy(gm)
    for call in calls:
        node = nodes[call]
        _set_argument(node, "attn_mask", _MASK, None)
        _set_argument(node, "is_causal", _IS_CAUSAL, True)
    copy.recompile()
    logs.log("aot", f"{len(calls)} attention call(s) with a causal mask now use is_causal=True")
    return copy


def causal_attention_calls(gm: torch.fx.GraphModule) -> list:
    """The attention calls of ``gm`` whose mask is the causal pattern (``gm`` is only read)."""
    found = []
    masks: dict[torch.fx.Node, object] = {}   # every layer's call reads the same mask: evaluated once
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _SDPA:
            continue
        mask = _argument(node, "attn_mask", _MASK)
        if not isinstance(mask, torch.fx.Node) or _argument(node, "is_causal", _IS_CAUSAL) is not False:
            continue
        if mask not in masks:
            masks[mask] = _evaluate_constant(mask)
        value = masks[mask]
        if value is not None and _is_causal_pattern(value, node):
            found.append(node)
    return found


def graph_module_copy(gm: torch.fx.GraphModule) -> tuple:
    """(a GraphModule with a copy of ``gm``'s graph, {``gm``'s node: the copy's node}).

    The copy's nodes keep ``gm``'s names and meta (example values shared, not copied), its
    attributes are ``gm``'s objects (parameters, submodules: shared), and ``gm`` is untouched."""
    graph = torch.fx.Graph(owning_module=None, tracer_cls=gm.graph._tracer_cls)
    nodes: dict = {}
    result = graph.graph_copy(gm.graph, nodes)
    old_output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    nodes[old_output] = graph.output(result, old_output.type)
    nodes[old_output].meta = dict(old_output.meta)
    graph._codegen = gm.graph._codegen   # the calling convention (Dynamo's pytree codegen, say)
    copy = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    copy.meta = dict(getattr(gm, "meta", {}))
    return copy, nodes


def _argument(node: torch.fx.Node, name: str, position: int):
    """An argument of the call by name or position; None, or False for ``is_causal``, when absent."""
    if name in node.kwargs:
        return node.kwargs[name]
    if len(node.args) > position:
        return node.args[position]
    return False if name == "is_causal" else None


def _set_argument(node: torch.fx.Node, name: str, position: int, value) -> None:
    if len(node.args) > position:
        args = list(node.args)
        args[position] = value
        node.args = tuple(args)
    else:
        node.kwargs = {**node.kwargs, name: value}


def _ancestors(node: torch.fx.Node) -> list | None:
    """``node`` and what it is computed from, in graph order; None when any of it reads a graph
    input or module state, draws random numbers, or when something outside writes into it
    (an in-place update)."""
    seen, stack = {node}, [node]
    while stack:
        current = stack.pop()
        if current.op not in ("call_function", "call_method"):
            return None   # placeholder, get_attr, call_module: values known only at run time
        if _is_random(current.target):
            return None
        for parent in current.all_input_nodes:
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    for member in seen:
        if any(_writes_in_place(user) for user in member.users):
            return None
    order = {n: k for k, n in enumerate(node.graph.nodes)}
    return sorted(seen, key=order.__getitem__)


_IN_PLACE_OPERATORS = frozenset([operator.setitem, operator.delitem, operator.iadd, operator.iand,
                                  operator.ifloordiv, operator.ilshift, operator.imod, operator.imul,
                                  operator.imatmul, operator.ior, operator.ipow, operator.irshift,
                                  operator.isub, operator.itruediv, operator.ixor])


def _writes_in_place(node: torch.fx.Node) -> bool:
    """``x.add_(y)``, ``torch.relu_(x)``, ``x[i] = y``, ``x += y``, ``out=``: a write into an argument."""
    if "out" in node.kwargs:
        return True
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.endswith("__")
    if node.op != "call_function":
        return False
    if node.target in _IN_PLACE_OPERATORS:
        return True
    name = getattr(node.target, "__name__", "")
    # operator.and_ / or_ / not_ are pure: Python's keywords forced their trailing underscore
    return name.endswith("_") and not name.endswith("__") and getattr(node.target, "__module__", "") != "_operator"


def _evaluate_constant(mask: torch.fx.Node):
    """The mask's value, computed now; None when it depends on run-time values, is random,
    too large, or fails to evaluate."""
    val = _meta_value(mask)
    if not isinstance(val, torch.Tensor) or val.numel() > MAX_MASK_ELEMENTS:
        return None
    if any(not isinstance(s, int) for s in val.shape):
        return None   # symbolic sizes: the pattern may differ between calls
    nodes = _ancestors(mask)
    if nodes is None:
        return None
    values: dict[torch.fx.Node, object] = {}
    load = lambda a: torch.fx.node.map_arg(a, values.__getitem__)  # noqa: E731
    try:
        with torch.no_grad():
            for n in nodes:
                args, kwargs = load(n.args), load(n.kwargs)
                if n.op == "call_method":
                    values[n] = getattr(args[0], n.target)(*args[1:], **kwargs)
                else:
                    values[n] = n.target(*args, **kwargs)
    except Exception as error:   # an op this evaluation cannot run: leave the call as it is
        logs.log("aot", f"attention mask not evaluated ahead of time ({type(error).__name__}: {error})")
        return None
    result = values[mask]
    return result if isinstance(result, torch.Tensor) else None


def _is_random(target) -> bool:
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return name.startswith(("rand", "normal", "bernoulli", "multinomial", "dropout", "poisson", "uniform",
                            "exponential", "geometric", "cauchy", "log_normal"))


def _meta_value(node):
    """The example value tracing recorded for ``node`` (surge's frontend: ``val``; Dynamo:
    ``example_value``)."""
    if not isinstance(node, torch.fx.Node):
        return None
    return node.meta.get("val", node.meta.get("example_value"))


def _is_causal_pattern(mask: torch.Tensor, call: torch.fx.Node) -> bool:
    """``mask`` means what ``is_causal=True`` means for this call: query i sees keys 0..i,
    for every batch and head, and broadcasting it changes no shape."""
    q_val, k_val = (_meta_value(_argument(call, name, k)) for k, name in enumerate(("query", "key")))
    if not isinstance(q_val, torch.Tensor) or not isinstance(k_val, torch.Tensor) or mask.dim() < 2:
        return False
    q_len, kv_len = q_val.shape[-2], k_val.shape[-2]
    scores = (*q_val.shape[:-2], q_len, kv_len)
    try:
        if torch.broadcast_shapes(tuple(mask.shape), scores) != scores:
            return False
    except RuntimeError:
        return False
    if tuple(mask.shape[-2:]) != (q_len, kv_len):
        return False
    allowed = torch.ones(q_len, kv_len, dtype=torch.bool, device=mask.device).tril()
    if mask.dtype == torch.bool:
        return bool((mask == allowed).all())
    if mask.dtype.is_floating_point:
        return bool(torch.where(allowed, mask == 0, mask == float("-inf")).all())
    return False
