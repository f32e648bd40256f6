"""The CUDA fused attention ops as extern calls, on the CPU (their kernels stood in:
``attention_standins.py``).

On a CUDA device ``scaled_dot_product_attention`` calls cuDNN's, flash or memory-efficient
attention, whose results mix tensors with undefined tensors, the RNG's seed and offset, and
sizes (``max_q``, ``max_k``), and whose backwards take those back. Each must stay one extern
call each way (no decomposition into matmuls and a softmax), and a graph with symbolic
sequence lengths must compile once for all of them: the sizes the ops return become size
expressions, the memory-efficient kernel's logsumexp (``ceil(q_len / 32) * 32`` rows) a
rounded size, and no compile per concrete size is made (``static_fallbacks``).
"""
from __future__ import annotations

import pytest
import torch

import surge
from surge.aot.decompositions import FUSED_ATTENTION_OPS, decomposition_for
from tests.aot.helpers import call_targets, compile_aot

from .attention_standins import standin_attention_kernels

aten = torch.ops.aten


def cudnn(q, k, v):
    return aten._scaled_dot_product_cudnn_attention(q, k, v, None, q.requires_grad, 0.0, True)[0]


def flash(q, k, v):
    return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]


def efficient(q, k, v):
    return aten._scaled_dot_product_efficient_attention(q, k, v, None, q.requires_grad, 0.0, True)[0]


FORWARD_AND_BACKWARD = {
    cudnn: (aten._scaled_dot_product_cudnn_attention.default, aten._scaled_dot_product_cudnn_attention_backward.default),
    flash: (aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_flash_attention_backward.default),
    efficient: (aten._scaled_dot_product_efficient_attention.default,
                aten._scaled_dot_product_efficient_attention_backward.default),
}


def block(attention):
    """Attention between pointwise work, as in a transformer layer."""
    def f(q, k, v):
        return (attention(q * 0.5, k, v).transpose(1, 2) * 2).sum(-1)
    f.__name__ = f"block_{attention.__name__}"
    return f


def qkv(seq, heads=2, kv_heads=2, requires_grad=False):
    return (torch.randn(2, heads, seq, 8, requires_grad=requires_grad),
            *(torch.randn(2, kv_heads, seq, 8, requires_grad=requires_grad) for _ in range(2)))


def test_every_fused_attention_op_stays_one_call():
    """No fused attention op of this torch is decomposed, and every one is listed."""
    for name in FUSED_ATTENTION_OPS:
        packet = getattr(aten, name)
        for overload in packet.overloads():
            assert decomposition_for(getattr(packet, overload)) is None, (name, overload)
    fused = {n for n in dir(aten) if n.startswith("_scaled_dot_product_") and "attention" in n
             and "attention_math" not in n}
    assert fused <= set(FUSED_ATTENTION_OPS), sorted(fused - set(FUSED_ATTENTION_OPS))


@pytest.mark.parametrize("attention", list(FORWARD_AND_BACKWARD), ids=lambda f: f.__name__)
def test_forward_and_backward_graphs_hold_the_fused_ops(attention):
    forward_op, backward_op = FORWARD_AND_BACKWARD[attention]
    fn = block(attention)
    with standin_attention_kernels():
        inputs = qkv(6, requires_grad=True)
        record = {}
        compiled = compile_aot(fn, list(inputs), record=record, boxed=True)
        got = torch.autograd.grad(compiled(*inputs).sum(), inputs)
        want = torch.autograd.grad(fn(*inputs).sum(), inputs)
    torch.testing.assert_close(got, want)
    forward, backward = (call_targets(g) for g in record["graphs"])
    assert forward.count(forward_op) == 1 and backward.count(backward_op) == 1
    matmuls = {aten.mm.default, aten.bmm.default, aten.amax.default, aten.exp.default}
    assert not matmuls & set(forward + backward), "attention was decomposed"


def _run_over_sequence_lengths(fn, backend, training, heads=2, kv_heads=2):
    with standin_attention_kernels():
        compiled = surge.compile(fn, dynamic=True, backend=backend)
        kernels = None
        for k, seq in enumerate((5, 9, 7, 12)):
            inputs = qkv(seq, heads, kv_heads, requires_grad=training)
            expected, actual = fn(*inputs), compiled(*inputs)
            torch.testing.assert_close(actual, expected)
            if training:
                cotangent = torch.randn_like(expected)
                got = torch.autograd.grad(actual, inputs, cotangent)
                want = torch.autograd.grad(expected, inputs, cotangent)
                torch.testing.assert_close(got, want)
            if k == 0:
                kernels = surge.counters["kernels"]
    assert surge.counters["static_fallbacks"] == 0 and surge.counters["fallbacks"] == 0
    assert surge.counters["graphs"] == 1 and surge.counters["recompiles"] == 0
    assert surge.counters["kernels"] == kernels > 0, "a later length compiled kernels again"


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("attention", list(FORWARD_AND_BACKWARD), ids=lambda f: f.__name__)
def test_symbolic_sequence_lengths_compile_once(attention, training):
    _run_over_sequence_lengths(block(attention), "cpp", training)


def test_grouped_query_attention_over_sequence_lengths():
    _run_over_sequence_lengths(block(cudnn), "cpp", True, heads=4, kv_heads=2)


@pytest.mark.parametrize("attention", [cudnn, efficient], ids=lambda f: f.__name__)
def test_symbolic_sequence_lengths_on_the_triton_backend(attention):
    _run_over_sequence_lengths(block(attention), "triton", True)
