"""A matmul operand that must be copied is stored in the order it is read: K of
``q @ k.transpose(-2, -1)`` split from a fused qkv projection is copied as (B, H, T, D)
rows and handed to bmm as a transposed view, never written down columns."""
import sympy
import torch

from surge.lowering.ir import ExternBuffer, Layout, TensorArg
from surge.lowering.matmul_operands import reads_down_columns
from surge.lowering.tensor import LazyTensor

from .helpers import assert_matches_eager, compile_fn, randn, schedule_of


def attention_scores(qkv):
    b, t, c3 = qkv.shape
    q, k, _ = qkv.split(c3 // 3, dim=2)
    q = q.view(b, t, 4, -1).transpose(1, 2)
    k = k.view(b, t, 4, -1).transpose(1, 2)
    return (q @ k.transpose(-2, -1)) * 0.25


def test_transposed_key_is_copied_along_memory_and_read_transposed():
    qkv = randn(2, 16, 3 * 32)
    schedule = schedule_of(attention_scores, qkv)
    (bmm,) = [s.buffer for s in schedule.steps if isinstance(getattr(s, "buffer", None), ExternBuffer)]
    key = bmm.args[1]
    assert isinstance(key, TensorArg) and key.layout is not None
    # [B*H, D, T] read as the transpose of the [B*H, T, D] rows the copy wrote
    assert [int(s) for s in key.layout.stride] == [16 * 8, 1, 8]
    assert_matches_eager(attention_scores, compile_fn(attention_scores, qkv), qkv, atol=1e-5, rtol=1e-5)


def _ints(*values):
    return tuple(sympy.Integer(v) for v in values)


def test_reads_down_columns():
    rows = LazyTensor.of_buffer("a", Layout(_ints(4, 8), _ints(8, 1)), torch.float32, "cpu")
    cols = LazyTensor.of_buffer("a", Layout(_ints(4, 8), _ints(1, 4)), torch.float32, "cpu")
    computed = LazyTensor(_ints(4, 8), torch.float32, "cpu", loader=lambda idx: cols.load(idx))
    assert not reads_down_columns(rows)
    assert reads_down_columns(cols) and reads_down_columns(computed)
