"""surge's core ATen op set, and the decompositions that lower everything else onto it.

The core set is what the aot layer hands to lowering. It is small on purpose: every
member is either a primitive that a loop-IR lowering can express directly
(pointwise, reduction, view, indexing), or an op that should stay a library call
because a generated kernel would not beat it (matmul, convolution, sort).

Ops outside the core set are decomposed when surge selects a decomposition for them
(``decomposition_for``); torch's decomposition table is the source of the Python
bodies, surge's policy below decides which are used. An op that is neither core nor
decomposed stays in the graph as an *extern* ATen call: it still runs (lowering
calls it as a library kernel), it just is not fused.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

aten = torch.ops.aten

# group -> (reason, packet names). Every overload of a listed packet is core.
CORE_OP_GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pointwise_unary": (
        "elementwise math: one load, one store, fuses into any neighbouring kernel",
        ("abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
         "rsqrt", "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
         "tanh", "asinh", "acosh", "atanh", "erf", "erfinv", "sigmoid", "sign", "floor",
         "ceil", "round", "trunc", "bitwise_not", "logical_not", "isnan", "isinf", "lgamma",
         "digamma", "relu"),
    ),
    "pointwise_binary": (
        "elementwise with broadcasting and type promotion; Scalar overloads keep "
        "Python numbers as constants instead of tensors",
        ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "fmod", "remainder",
         "atan2", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
         "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
         "bitwise_right_shift", "where", "clamp",
         "clamp_min", "clamp_max"),
    ),
    "conversion": (
        "dtype/device change of a whole tensor (the only op that changes device)",
        ("_to_copy", "clone"),
    ),
    "factory": (
        "tensors made inside the graph; sizes are static, values are index expressions",
        ("full", "empty_strided", "scalar_tensor", "iota", "arange"),
    ),
    "random": (
        "random numbers: never recomputed in backward, kept as one op so that "
        "fallback_random can replay eager's RNG stream exactly",
        ("rand", "randn", "randint", "bernoulli", "native_dropout", "normal_functional",
         "uniform", "exponential"),
    ),
    "view": (
        "metadata-only: lowering turns them into index expressions, no copy",
        ("view", "permute", "expand", "slice", "select", "squeeze", "unsqueeze",
         "as_strided"),
    ),
    "reduction": (
        "reductions over one or more dims: the loop IR's reduction node",
        ("sum", "prod", "amax", "amin", "argmax", "argmin", "any", "all", "var",
         "cumsum", "cumprod"),
    ),
    "indexing": (
        "data-dependent gathers and scatters; lowerable as indirect loads/stores (embedding and "
        "index_copy kept whole: their negative indices are out of range, index's count from the end)",
        ("cat", "constant_pad_nd", "gather", "scatter", "scatter_add", "scatter_reduce",
         "index", "index_put", "index_select", "slice_scatter", "select_scatter", "embedding", "index_copy",
         "diagonal_scatter", "as_strided_scatter", "flip"),
    ),
    "library": (
        "compute-bound or algorithmic ops that stay library calls (BLAS, oneDNN, sort)",
        ("mm", "bmm", "addmm", "convolution", "convolution_backward", "sort", "topk",
         "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
         "avg_pool2d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward"),
    ),
    "mutation": (
        "only as the final copy-back of a mutated graph input",
        ("copy_",),
    ),
}

CORE_PACKETS: frozenset[str] = frozenset(
    name for _, names in CORE_OP_GROUPS.values() for name in names
)

# The fused attention ops ``scaled_dot_product_attention`` hands a call to (ATen's chooser
# picks one for the query's device, above the tracer), and their backwards.
FUSED_ATTENTION_OPS = (
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_fused_attention_overrideable_backward",
)

# Ops torch's table can decompose (in some torch version) but surge keeps as extern calls, and why.
KEEP_EXTERN: dict[str, str] = {
    "embedding_dense_backward": "its decomposition is an accumulating index_put over the whole "
                                "table; the library kernel handles repeated indices directly",
    **{name: "fused attention stays a library call: a decomposition materializes the full "
             "attention matrix (and the backward recomputes it)" for name in FUSED_ATTENTION_OPS},
}


def packet_name(op) -> str:
    return op._schema.name.split("::", 1)[1]


def is_core(op) -> bool:
    return packet_name(op) in CORE_PACKETS


def is_random(op) -> bool:
    return torch.Tag.nondeterministic_seeded in op.tags


@functools.lru_cache(maxsize=1)
def _torch_table() -> dict:
    import torch._decomp

    return dict(torch._decomp.decomposition_table)


def decomposition_for(op) -> Callable | None:
    """The Python body that replaces ``op`` in traced graphs, or None to keep it.

    Random ops are never decomposed: the graph then calls the very ATen random
    kernels eager calls, in eager's order, so aot_eager draws eager's numbers.
    (Code generators may swap in their own generator unless
    ``options.fallback_random`` is set.)
    """
    name = packet_name(op)
    if name in CORE_PACKETS or name in KEEP_EXTERN or is_random(op):
        return None
    return _torch_table().get(op)


def describe_core_set() -> str:
    """The core set as Markdown, for docs/aot.md (kept in sync by a test)."""
    lines = ["| group | why it is core | ops |", "| --- | --- | --- |"]
    for group, (reason, names) in CORE_OP_GROUPS.items():
        lines.append(f"| {group} | {reason} | {', '.join(names)} |")
    return "\n".join(lines)


# ------------------------------------------------------------ surge's own bodies
# Decompositions written for surge, applied even when tracing without the torch
# table (``decompose=False``), because functionalization needs them.
_SURGE_DECOMPOSITIONS: dict = {}


def register_decomposition(op):
    def wrap(fn):
        _SURGE_DECOMPOSITIONS[op] = fn
        return fn
    return wrap


def surge_decomposition(op) -> Callable | None:
    return _SURGE_DECOMPOSITIONS.get(op)


@register_decomposition(aten.copy.default)
def _copy(self, src, non_blocking=False):
    # The functional form of ``self.copy_(src)``: src converted to self's dtype
    # and device, broadcast to self's shape, materialized with self's layout.
    value = src
    if src.dtype != self.dtype or src.device != self.device:
        value = aten._to_copy(src, dtype=self.dtype, device=self.device)
    if tuple(value.shape) != tuple(self.shape):
        value = aten.expand(value, list(self.shape))
    return aten.clone(value, memory_format=torch.contiguous_format)


def _like_kwargs(self, dtype, device):
    return dict(dtype=dtype if dtype is not None else self.dtype,
                device=device if device is not None else self.device)


# Factories are called through their overload (``aten.full.default``), not the packet: a
# packet call tries each overload in turn, and on torch 2.11 one with an ``int[]`` size
# (``full.names``) reads symbolic sizes as Python ints first, specializing them.
@register_decomposition(aten.fill.Scalar)
def _fill_scalar(self, value):
    return aten.full.default(list(self.shape), value, dtype=self.dtype, device=self.device)


@register_decomposition(aten.fill.Tensor)
def _fill_tensor(self, value):
    value = aten._to_copy(value, dtype=self.dtype, device=self.device)
    return aten.clone(aten.expand(value, list(self.shape)), memory_format=torch.contiguous_format)


@register_decomposition(aten.zero.default)
def _zero(self):
    return aten.full.default(list(self.shape), 0, dtype=self.dtype, device=self.device)


@register_decomposition(aten.full_like.default)
def _full_like(self, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return aten.full.default(list(self.shape), fill_value, **_like_kwargs(self, dtype, device))


@register_decomposition(aten.empty_like.default)
def _empty_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # Contents are undefined, so any layout is allowed: a dense one keeps the
    # tensor viewable like eager's (which also picks a dense layout).
    stride = self.stride() if memory_format in (None, torch.preserve_format) and _is_dense(self) else None
    if stride is None:
        return aten.full.default(list(self.shape), 0, **_like_kwargs(self, dtype, device))
    return aten.empty_strided(list(self.shape), list(stride), **_like_kwargs(self, dtype, device))


def _is_dense(t) -> bool:
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride()), key=lambda p: p[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


@register_decomposition(aten.empty.memory_format)
def _empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        return NotImplemented
    stride, acc = [], 1
    for s in reversed(list(size)):
        stride.insert(0, acc)
        acc *= max(s, 1)
    return aten.empty_strided(list(size), stride, dtype=dtype, device=device)
