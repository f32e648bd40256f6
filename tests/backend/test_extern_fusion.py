"""Work around extern matmuls: the masked softmax between two batched matmuls is one
kernel, and a matmul with a transposed weight reads it in place, on both code generators."""
import math

import torch

from surge.lowering.ir import TensorArg
from surge.schedule.groups import KernelGroup
from tests.backend_cpp.helpers import compile_cases

from .helpers import assert_matches_eager, compile_fn, randn, schedule_of

aten = torch.ops.aten
MASK = torch.tril(torch.ones(16, 16, dtype=torch.bool)).view(1, 1, 16, 16)


def masked_softmax_attention(q, k, v, mask):
    """GPT's explicit attention: the scores come from a bmm over [B*H, T, T], the
    softmax runs over [B, H, T | T], and the result feeds a bmm over [B*H, T, T]."""
    t = q.shape[2]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    att = att.masked_fill(~mask[:, :, :t, :t], float("-inf"))
    return torch.softmax(att, dim=-1) @ v


def linear_with_transposed_weight(x, w):
    return (x @ w.t()) * 2


def _attention_inputs():
    return randn(2, 4, 16, 8), randn(2, 4, 16, 8), randn(2, 4, 16, 8), MASK


def _kernels_between_matmuls(schedule):
    kinds = ["kernel" if isinstance(s, KernelGroup) else "extern" for s in schedule.steps]
    first, last = kinds.index("extern"), len(kinds) - 1 - kinds[::-1].index("extern")
    return kinds[first + 1:last].count("kernel")


def test_masked_softmax_is_one_kernel_between_the_matmuls():
    s = schedule_of(masked_softmax_attention, *_attention_inputs())
    assert _kernels_between_matmuls(s) == 1, str(s)
    softmax = [k for k in s.kernels if k.is_reduction]
    assert len(softmax) == 1 and len(softmax[0].internal) == 2, "max and sum stay in registers"


def test_masked_softmax_triton_matches_eager():
    c = compile_fn(masked_softmax_attention, *_attention_inputs())
    assert sum(1 for name in c.kernel_names if "softmax" in name or "where" in name) == 1, c.kernel_names
    assert_matches_eager(masked_softmax_attention, c, *_attention_inputs(), atol=1e-5, rtol=1e-5)


def test_masked_softmax_cpp_is_one_kernel_and_matches_eager():
    c = compile_cases({"attention": (masked_softmax_attention, _attention_inputs)})["attention"]
    s = c.schedule
    assert _kernels_between_matmuls(s) == 1, str(s)
    assert_matches_eager(masked_softmax_attention, c, *_attention_inputs(), atol=1e-5, rtol=1e-5)


def test_matmul_reads_a_transposed_weight_in_place():
    """The lm head ``x @ wte.weight.t()``: no kernel copies the weight before the matmul."""
    x, w = randn(6, 32), randn(50, 32)
    s = schedule_of(linear_with_transposed_weight, x, w)
    assert not isinstance(s.steps[0], KernelGroup), "no copy kernel before the matmul"
    mm = s.steps[0].buffer
    assert mm.op is aten.mm.default
    weight = mm.args[1]
    assert isinstance(weight, TensorArg) and weight.buffer == "arg1"
    assert tuple(weight.layout.stride) == (1, 32), "the weight's transpose, read in place"
    assert_matches_eager(linear_with_transposed_weight, compile_fn(linear_with_transposed_weight, x, w),
                         randn(6, 32), randn(50, 32))
