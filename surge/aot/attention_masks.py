"""Attention masks whose value is known when compiling: the causal pattern becomes
``is_causal=True``, a mask hiding nothing is dropped.

A model that builds its mask from ``arange``s and hands it to
``scaled_dot_product_attention`` as ``attn_mask`` makes every attention call read a
``[batch, heads, q, kv]`` bias, and may keep the call from the fused kernels altogether.
transformers does so whenever it is compiled: eager checks the mask's values (plain causal,
or no padding at all) and then passes ``is_causal=True`` or no mask; while compiling it avoids
reading tensor values and builds the mask instead.

- GPT-2 and Llama without a KV cache build the causal mask: with ``is_causal=True`` the fused
  kernels skip the blocks above the diagonal and read no mask (on an H200, GPT-2's attention
  forward and backward take about half the time).
- BERT with no padding builds ``q_idx >= 0`` over ``[batch, 1, q, kv]``: every key visible.
  Expanded from one column, its last dimension has stride 0, which every fused CUDA kernel
  refuses (ATen's chooser requires the mask's last stride to be 1), so the call runs the math
  form (two float32 matmuls and a softmax per layer on bf16 inputs) where eager, passed no
  mask, runs cuDNN's fused kernel. Without the mask the traced call is eager's.

The mask depends on no graph input (only on constants and static sizes), so its value is
known when compiling: this pass evaluates it on the example device and, when it is exactly
one of those patterns for every batch and head (causal: ``tril(ones(q, kv))`` as booleans,
or 0 / -inf as an additive mask; nothing hidden: all True, or all 0), rewrites the call.
The mask's nodes are left to dead-code elimination. It runs on the torch-level graph before
tracing, so the forward and the backward traced from it agree.
"""
from __future__ import annotations

import enum
import operator

import torch
import torch.fx

from .. import logs

_SDPA = (torch.nn.functional.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
# sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)
_MASK, _IS_CAUSAL = 3, 5
# masks larger than this are not evaluated ahead of time (memory on the device while compiling)
MAX_MASK_ELEMENTS = 1 << 28


class MaskPattern(enum.Enum):
    """What a constant mask means, as the call arguments that say the same without it."""

    CAUSAL = "is_causal=True"
    NOTHING_HIDDEN = "no mask"


def simplify_attention_masks(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with its attention calls whose mask is a known pattern calling without the mask
    (``is_causal=True`` for the causal one): a copy when there are such calls (``gm`` itself,
    the frontend's graph, is left as it is), else ``gm``."""
    found = constant_mask_calls(gm)
    if not found:
        return gm
    copy, nodes = graph_module_copy(gm)
    for call, pattern in found:
        node = nodes[call]
        _set_argument(node, "attn_mask", _MASK, None)
        if pattern is MaskPattern.CAUSAL:
            _set_argument(node, "is_causal", _IS_CAUSAL, True)
    copy.recompile()
    for pattern in MaskPattern:
        count = sum(1 for _, p in found if p is pattern)
        if count:
            logs.log("aot", f"{count} attention call(s) with a constant mask now use {pattern.value}")
    return copy


def constant_mask_calls(gm: torch.fx.GraphModule) -> list:
    """(call, ``MaskPattern``) of each attention call of ``gm`` whose mask is a known pattern
    (``gm`` is only read)."""
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
        pattern = _pattern(value, node) if value is not None else None
        if pattern is not None:
            found.append((node, pattern))
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


def _pattern(mask: torch.Tensor, call: torch.fx.Node) -> MaskPattern | None:
    """The pattern ``mask`` is for this call (None: another one), for every batch and head;
    None too for a mask whose broadcasting would change the result's shape."""
    q_val, k_val = (_meta_value(_argument(call, name, k)) for k, name in enumerate(("query", "key")))
    if not isinstance(q_val, torch.Tensor) or not isinstance(k_val, torch.Tensor) or mask.dim() < 2:
        return None
    q_len, kv_len = q_val.shape[-2], k_val.shape[-2]
    scores = (*q_val.shape[:-2], q_len, kv_len)
    try:
        if torch.broadcast_shapes(tuple(mask.shape), scores) != scores:
            return None
    except RuntimeError:
        return None
    visible = mask if mask.dtype == torch.bool else mask == 0
    if mask.dtype != torch.bool and not bool(torch.where(visible, True, mask == float("-inf")).all()):
        return None   # finite biases (finfo.min, ALiBi): not a pattern of visible keys
    if bool(visible.all()):
        return MaskPattern.NOTHING_HIDDEN
    if tuple(mask.shape[-2:]) == (q_len, kv_len):
        allowed = torch.ones(q_len, kv_len, dtype=torch.bool, device=mask.device).tril()
        if bool((visible == allowed).all()):
            return MaskPattern.CAUSAL
    return None
