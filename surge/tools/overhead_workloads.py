"""Workloads whose time is mostly launch overhead: small batches, short kernels.

These are what CUDA graphs (``mode="reduce-overhead"``) are for: the ``overhead`` suite,
``python -m surge bench --suite overhead --contenders
eager,torch.compile,torch.compile:reduce-overhead,surge,surge:reduce-overhead``.

- ``gpt2_b1_t8``: transformers' GPT-2 124M, batch 1, 8 tokens, no KV cache (bf16 on CUDA);
- ``gelu_stack_16``: 16 layers of ``gelu(x @ w) + x`` at batch 4, width 256 (bf16 on CUDA);
- ``gpt2_decode_128``: 128 decoding steps of a GPT-2 124M-shaped model, one token per call,
  keys and values in static caches (module buffers) written in place; its time is the
  128 steps' (tokens per second: 128 / time). Tokens are given (teacher forcing), so every
  contender decodes the same sequence.
- ``llama_decode_128``: the same with a Llama-style model (RMSNorm, rotary positions,
  SwiGLU; the bench's ``llama_bundled`` shape).
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from .workloads import Instance, Unavailable, pick, randn_maker, token_maker, workload


class GeluStack(nn.Module):
    def __init__(self, depth: int, width: int):
        super().__init__()
        self.weights = nn.ParameterList(nn.Parameter(torch.randn(width, width) / width ** 0.5) for _ in range(depth))

    def forward(self, x):
        for w in self.weights:
            x = F.gelu(x @ w) + x
        return x


@workload("gelu_stack_16", "16 layers of gelu(x @ w) + x, batch 4, width 256 (bfloat16 on CUDA), launch-bound",
          suite="overhead")
def gelu_stack_workload(device, scale):
    batch, width, depth = pick(device, scale, gpu=(4, 256, 16), cpu=(4, 256, 16), quick=(4, 32, 4), tiny=(2, 8, 2))
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    model = GeluStack(depth, width).to(device=device, dtype=dtype)
    return Instance(model, randn_maker(device, dtype, (batch, width)), dtype=dtype,
                    sizes={"batch": batch, "width": width, "layers": depth})


@workload("gpt2_b1_t8", "transformers GPT-2 124M, batch 1, 8 tokens, no KV cache, inference (bf16 on CUDA)",
          suite="overhead")
def gpt2_small_batch_workload(device, scale):
    from . import hf_workloads

    if not hf_workloads.AVAILABLE:
        raise Unavailable("transformers is not installed")
    transformers = hf_workloads._import_transformers()
    batch, seq, layers, width, heads, vocab = pick(
        device, scale, gpu=(1, 8, 12, 768, 12, 50257), cpu=(1, 8, 12, 768, 12, 50257),
        quick=(1, 8, 2, 64, 4, 512), tiny=(1, 4, 1, 16, 2, 128))
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=1024, n_embd=width, n_layer=layers, n_head=heads,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).to(device=device, dtype=dtype).eval()
    return Instance(hf_workloads.Logits(model), token_maker(device, vocab, batch, seq), dtype=dtype,
                    sizes={"batch": batch, "seq": seq, "layers": layers, "width": width, "vocab": vocab})


# ---------------------------------------------------------------- decoding with a static KV cache

class CachedBlock(nn.Module):
    """A pre-LayerNorm GPT-2 block for one token at a time; keys and values of earlier
    positions live in ``k_cache`` / ``v_cache`` (1, heads, max_len, head_dim)."""

    def __init__(self, width: int, heads: int, max_len: int):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.c_fc, self.mlp_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_len, width // heads))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_len, width // heads))

    def forward(self, x, pos, visible):
        _, _, width = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(width, dim=2)
        q, k, v = (t.view(1, 1, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        self.k_cache.index_copy_(2, pos, k)   # written in place: the cache never moves
        self.v_cache.index_copy_(2, pos, v)
        y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=visible)
        x = x + self.c_proj(y.transpose(1, 2).reshape(1, 1, width))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class CachedGPT(nn.Module):
    """GPT-2's shape, one token per call: ``forward(token (1, 1), pos (1,)) -> logits (1, 1, vocab)``."""

    def __init__(self, vocab: int, width: int, heads: int, layers: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(max_len, width)
        self.blocks = nn.ModuleList(CachedBlock(width, heads, max_len) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, token, pos):
        x = self.wte(token) + self.wpe(pos)
        visible = (torch.arange(self.max_len, device=pos.device) <= pos).view(1, 1, 1, self.max_len)
        for block in self.blocks:
            x = block(x, pos, visible)
        return self.lm_head(self.ln_f(x))


@dataclasses.dataclass
class DecodeInstance(Instance):
    """Runs ``len(tokens)`` decoding steps per call; the results are every step's logits."""

    def call_args(self, inputs) -> tuple:
        tokens, positions = inputs
        return tokens[0], positions[0]

    def run(self, compiled, target, inputs):
        tokens, positions = inputs
        with torch.no_grad():
            # each step's logits copied out: a CUDA graph replay overwrites the previous ones
            return torch.cat([compiled(token, pos).clone() for token, pos in zip(tokens, positions)], dim=1)


def _decode_instance(model, device: str, dtype, steps: int, vocab: int, sizes: dict) -> DecodeInstance:
    make_tokens = token_maker(device, vocab, 1, steps)

    def make_inputs(seed: int):
        (tokens,) = make_tokens(seed)
        return ([t.clone() for t in tokens.split(1, dim=1)],
                [torch.tensor([i], device=device) for i in range(steps)])

    return DecodeInstance(model.to(device=device, dtype=dtype).eval(), make_inputs, dtype=dtype,
                          sizes={"steps": steps, **sizes, "vocab": vocab})


@workload("gpt2_decode_128", "128 decoding steps of a GPT-2 124M-shaped model with a static KV cache "
                             "(bf16 on CUDA; tokens/s = 128 / time)", suite="overhead")
def gpt2_decode_workload(device, scale):
    steps, layers, width, heads, vocab = pick(device, scale, gpu=(128, 12, 768, 12, 50257),
                                              cpu=(32, 2, 256, 4, 8192), quick=(8, 2, 64, 4, 512),
                                              tiny=(4, 1, 16, 2, 128))
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    return _decode_instance(CachedGPT(vocab, width, heads, layers, steps), device, dtype, steps, vocab,
                            {"layers": layers, "width": width, "heads": heads})


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def _rotate(t, cos, sin):
    """Rotary positions on the last dimension, as two halves."""
    a, b = t.chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


class CachedLlamaBlock(nn.Module):
    """A Llama block (RMSNorm, rotary positions, SwiGLU) for one token at a time, keys and
    values in static caches as ``CachedBlock``'s."""

    def __init__(self, width: int, heads: int, max_len: int):
        super().__init__()
        hidden = (width * 8 // 3 + 63) // 64 * 64
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(width), RMSNorm(width)
        self.wqkv, self.wo = nn.Linear(width, 3 * width, bias=False), nn.Linear(width, width, bias=False)
        self.w_gate_up, self.w_down = nn.Linear(width, 2 * hidden, bias=False), nn.Linear(hidden, width, bias=False)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_len, width // heads))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_len, width // heads))

    def forward(self, x, pos, visible, cos, sin):
        _, _, width = x.shape
        q, k, v = self.wqkv(self.attn_norm(x)).split(width, dim=2)
        q, k, v = (t.view(1, 1, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=visible)
        x = x + self.wo(y.transpose(1, 2).reshape(1, 1, width))
        gate, up = self.w_gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.w_down(F.silu(gate) * up)


class CachedLlama(nn.Module):
    """A Llama-style decoder, one token per call: ``forward(token (1, 1), pos (1,)) -> logits``."""

    def __init__(self, vocab: int, width: int, heads: int, layers: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(CachedLlamaBlock(width, heads, max_len) for _ in range(layers))
        self.norm = RMSNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        head_dim = width // heads
        angles = torch.outer(torch.arange(max_len).float(),
                             1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def forward(self, token, pos):
        x = self.embed(token)
        cos, sin = self.cos[pos].view(1, 1, 1, -1), self.sin[pos].view(1, 1, 1, -1)
        visible = (torch.arange(self.max_len, device=pos.device) <= pos).view(1, 1, 1, self.max_len)
        for block in self.blocks:
            x = block(x, pos, visible, cos, sin)
        return self.lm_head(self.norm(x))


@workload("llama_decode_128", "128 decoding steps of a Llama-style model (8 layers, width 2048) with a static "
                              "KV cache (bf16 on CUDA; tokens/s = 128 / time)", suite="overhead")
def llama_decode_workload(device, scale):
    steps, layers, width, heads, vocab = pick(device, scale, gpu=(128, 8, 2048, 16, 32000),
                                              cpu=(32, 2, 256, 4, 8192), quick=(8, 2, 64, 4, 512),
                                              tiny=(4, 1, 16, 2, 128))
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    return _decode_instance(CachedLlama(vocab, width, heads, layers, steps), device, dtype, steps, vocab,
                            {"layers": layers, "width": width, "heads": heads})
