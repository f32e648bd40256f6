"""CPU kernels standing in for the CUDA-only fused attention ops, for tests without a GPU.

On a CUDA device ``scaled_dot_product_attention`` calls ``_scaled_dot_product_cudnn_attention``,
``_scaled_dot_product_flash_attention`` or ``_scaled_dot_product_efficient_attention`` and
their backwards. Their schemas are what tracing, lowering, the memory plan and the host code
handle: tuples mixing tensors, undefined tensors, sizes (``max_q``, ``max_k``) and the dropout
RNG's seed and offset. The CPU build has only their meta kernels; ``standin_attention_kernels``
registers CPU kernels for them for the duration of a test, computing attention as the math
formulation does (in float32), so that a program calling these ops runs eagerly and compiled
on the CPU and the two can be compared. Dropout is not stood in (the tests use none).
"""
from __future__ import annotations

import contextlib

import torch

aten = torch.ops.aten


def _expanded(q, k, v):
    """k and v with one head per query head (grouped-query attention shares each among a group)."""
    group = q.shape[1] // k.shape[1]
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), group


def _probabilities(q, k, bias, is_causal, scale):
    """(softmax(q k^T * scale + bias), its logsumexp, the scale), in float32."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = q.float() @ k.float().transpose(-2, -1) * scale
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if bias is not None:
        scores = scores + (bias.float() if bias.dtype != torch.bool else
                           torch.zeros(bias.shape).masked_fill(~bias, float("-inf")))
    lse = scores.logsumexp(-1)
    return (scores - lse.unsqueeze(-1)).exp(), lse, scale


def _attention(q, k, v, bias, is_causal, scale):
    """(output, logsumexp) of attention, computed in float32, the output in q's dtype."""
    k, v, _ = _expanded(q, k, v)
    p, lse, _ = _probabilities(q, k, bias, is_causal, scale)
    return (p @ v.float()).to(q.dtype), lse


def _gradients(grad_out, q, k, v, bias, is_causal, scale):
    """(dq, dk, dv) by the softmax's chain rule (a kernel runs below autograd: no autograd.grad)."""
    ke, ve, group = _expanded(q, k, v)
    p, _, scale = _probabilities(q, ke, bias, is_causal, scale)
    grad_out = grad_out.float()
    dv = p.transpose(-2, -1) @ grad_out
    dp = grad_out @ ve.float().transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    dq = ds @ ke.float() * scale
    dk = ds.transpose(-2, -1) @ q.float() * scale

    def per_kv_head(g):
        return g.unflatten(1, (k.shape[1], group)).sum(2)
    return dq.to(q.dtype), per_kv_head(dk).to(k.dtype), per_kv_head(dv).to(v.dtype)


def _seed_offset():
    return torch.zeros((), dtype=torch.long), torch.zeros((), dtype=torch.long)


def _cudnn(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
           return_debug_mask=False, *, scale=None):
    out, lse = _attention(q, k, v, attn_bias, is_causal, scale)
    seed, offset = _seed_offset()
    empty = torch.empty(0)
    return (out, lse.unsqueeze(-1), empty, empty, q.shape[2], k.shape[2], seed, offset, empty)


def _cudnn_backward(grad_out, q, k, v, out, logsumexp, philox_seed, philox_offset, attn_bias,
                    cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, *, scale=None):
    return _gradients(grad_out, q, k, v, attn_bias, is_causal, scale)


def _flash(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    out, lse = _attention(q, k, v, None, is_causal, scale)
    seed, offset = _seed_offset()
    empty = torch.empty(0)
    return out, lse, empty, empty, q.shape[2], k.shape[2], seed, offset, empty


def _flash_backward(grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                    dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    return _gradients(grad_out, q, k, v, None, is_causal, scale)


def _efficient(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None):
    out, lse = _attention(q, k, v, attn_bias, is_causal, scale)
    seed, offset = _seed_offset()
    # the CUDA kernel pads the logsumexp's rows to a multiple of 32, and has none unless asked
    rows = -(-q.shape[2] // 32) * 32 if compute_log_sumexp else 0
    padded = torch.zeros(*lse.shape[:2], rows)
    padded[..., :min(rows, lse.shape[2])] = lse[..., :rows]
    return out, padded, seed, offset


def _efficient_backward(grad_out, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset,
                        dropout_p, grad_input_mask, is_causal=False, *, scale=None):
    return (*_gradients(grad_out, q, k, v, attn_bias, is_causal, scale), None)


STANDINS = {
    "_scaled_dot_product_cudnn_attention": _cudnn,
    "_scaled_dot_product_cudnn_attention_backward": _cudnn_backward,
    "_scaled_dot_product_flash_attention": _flash,
    "_scaled_dot_product_flash_attention_backward": _flash_backward,
    "_scaled_dot_product_efficient_attention": _efficient,
    "_scaled_dot_product_efficient_attention_backward": _efficient_backward,
}


@contextlib.contextmanager
def standin_attention_kernels():
    """The CUDA fused attention ops run on CPU tensors while inside (registered, then removed)."""
    library = torch.library.Library("aten", "IMPL")
    try:
        for name, kernel in STANDINS.items():
            library.impl(name, kernel, "CPU")
        yield
    finally:
        library._destroy()
