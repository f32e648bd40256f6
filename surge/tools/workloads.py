"""The bench's workloads, registered by name.

A workload is a function ``build(device, scale) -> Instance``; ``scale`` is
"full" (sizes that fill an H200 on CUDA, sized for two cores on CPU), "quick"
(small sizes for a fast run and for CI) or "tiny" (the per-call overhead
measurement: sizes so small that the time is all Python and launches).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

SCALES = ("full", "quick", "tiny")
# "default": surge's own workloads; "models": the model zoo (zoo_workloads.py);
# "overhead": launch-bound workloads for the CUDA graph mode (overhead_workloads.py).
SUITES = ("default", "models", "overhead")


class Unavailable(Exception):
    """This workload cannot be built here (a library it needs is missing); the message says why."""


@dataclasses.dataclass
class Instance:
    """One workload at one size, ready to run under any contender.

    ``target`` is what a contender compiles: a function, or an ``nn.Module`` that
    each contender gets its own deep copy of (same weights) so that training
    steps do not share gradients. ``make_inputs(seed)`` makes fresh random
    inputs. A training instance runs forward, ``loss_fn`` and backward, and its
    results are the loss and every parameter's gradient.
    """

    target: Callable | nn.Module
    make_inputs: Callable[[int], tuple]
    sizes: dict[str, Any]
    dtype: torch.dtype
    training: bool = False
    # Bytes a fused kernel must at least read and write (memory-bound workloads
    # only): the basis of the achieved-bandwidth column.
    bytes_moved: int | None = None
    loss_fn: Callable | None = None
    # Run forward and loss under torch.autocast to this dtype (mixed-precision training).
    autocast: torch.dtype | None = None
    # A call's results depend on the calls before it (an optimizer step): each contender's
    # check call is compared with one eager call from a copy of the state it left.
    stateful: bool = False

    def fresh_target(self):
        if isinstance(self.target, nn.Module):
            return copy.deepcopy(self.target)
        return self.target

    def run(self, compiled, target, inputs):
        """One call (inference) or one forward+backward (training); returns the results to compare."""
        if not self.training:
            with torch.no_grad():
                return compiled(*inputs)
        params = [p for p in target.parameters() if p.requires_grad]
        for p in params:
            p.grad = None
        with self.autocast_context(inputs):
            out = compiled(*inputs)
            loss = (self.loss_fn or _mean_square)(out, inputs)
        loss.backward()
        return [loss.detach()] + [p.grad for p in params]

    def call_args(self, inputs) -> tuple:
        """The arguments of one call of the target (what ``surge.explain`` runs)."""
        return inputs

    def autocast_context(self, inputs):
        if self.autocast is None:
            return contextlib.nullcontext()
        device = next((t.device.type for t in inputs if isinstance(t, torch.Tensor)), "cpu")
        return torch.autocast(device, dtype=self.autocast)

    @property
    def tolerance(self) -> tuple[float, float]:
        """(rtol, atol) for comparing a compiled result with eager's."""
        if self.dtype in (torch.bfloat16, torch.float16):
            return (4e-2, 4e-2)  # when no float32 reference judges the result (bench.compare_low_precision)
        # Fused kernels and reordered reductions differ from eager in the last bits;
        # training gradients go through many such reductions.
        return (1e-3, 1e-3) if self.training else (1e-4, 1e-4)


def _mean_square(out, inputs):
    return out.float().square().mean()


WORKLOADS: dict[str, Callable[[str, str], Instance]] = {}
DESCRIPTIONS: dict[str, str] = {}
SUITE_OF: dict[str, str] = {}


def workload(name: str, description: str, suite: str = "default"):
    def register(build):
        assert suite in SUITES, suite
        WORKLOADS[name] = build
        DESCRIPTIONS[name] = description
        SUITE_OF[name] = suite
        return build

    return register


def pick(device: str, scale: str, *, gpu, cpu, quick, tiny):
    """The size for this device and scale."""
    if scale == "tiny":
        return tiny
    if scale == "quick":
        return quick
    return gpu if device.startswith("cuda") else cpu


def randn_maker(device: str, dtype: torch.dtype, *shapes):
    """``make_inputs`` that draws one tensor per shape from a seeded generator on ``device``."""

    def make_inputs(seed: int):
        gen = torch.Generator(device=device).manual_seed(seed)
        return tuple(torch.randn(s, generator=gen, device=device, dtype=dtype) for s in shapes)

    return make_inputs


def tensor_bytes(shape, dtype) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * torch.empty((), dtype=dtype).element_size()


# ---------------------------------------------------------------- fused kernels

def seed_block(x, w, b, r):
    return F.gelu(x @ w + b) + r


def _seed_block_instance(device, scale, dtype):
    m, k = pick(device, scale, gpu=(16384, 4096), cpu=(1024, 1024), quick=(64, 64), tiny=(8, 8))
    return Instance(
        seed_block, randn_maker(device, dtype, (m, k), (k, k), (k,), (m, k)),
        sizes={"M": m, "K": k, "N": k}, dtype=dtype,
    )


@workload("seed_block_fp32", "gelu(x @ w + b) + r, float32")
def seed_block_fp32(device, scale):
    return _seed_block_instance(device, scale, torch.float32)


@workload("seed_block_bf16", "gelu(x @ w + b) + r, bfloat16")
def seed_block_bf16(device, scale):
    return _seed_block_instance(device, scale, torch.bfloat16)


def layernorm_gelu(x, weight, bias):
    return F.gelu(F.layer_norm(x, x.shape[-1:], weight, bias))


def _rows_cols(device, scale):
    return pick(device, scale, gpu=(32768, 4096), cpu=(4096, 1024), quick=(64, 256), tiny=(4, 16))


@workload("layernorm_gelu", "gelu(layer_norm(x)), float32, memory-bound")
def layernorm_gelu_workload(device, scale):
    rows, cols = _rows_cols(device, scale)
    dtype = torch.float32
    return Instance(
        layernorm_gelu, randn_maker(device, dtype, (rows, cols), (cols,), (cols,)),
        sizes={"rows": rows, "cols": cols}, dtype=dtype,
        bytes_moved=2 * tensor_bytes((rows, cols), dtype) + 2 * tensor_bytes((cols,), dtype),
    )


def row_softmax(x):
    return torch.softmax(x, dim=-1)


@workload("softmax", "softmax over rows, float32, memory-bound")
def softmax_workload(device, scale):
    rows, cols = _rows_cols(device, scale)
    dtype = torch.float32
    return Instance(
        row_softmax, randn_maker(device, dtype, (rows, cols)),
        sizes={"rows": rows, "cols": cols}, dtype=dtype,
        bytes_moved=2 * tensor_bytes((rows, cols), dtype),
    )


def rmsnorm(x, weight):
    # The usual mixed-precision RMSNorm: statistics in float32, result cast back.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return xf.to(x.dtype) * weight


@workload("rmsnorm_bf16", "RMSNorm with float32 statistics, bfloat16, memory-bound")
def rmsnorm_workload(device, scale):
    rows, cols = _rows_cols(device, scale)
    dtype = torch.bfloat16
    return Instance(
        rmsnorm, randn_maker(device, dtype, (rows, cols), (cols,)),
        sizes={"rows": rows, "cols": cols}, dtype=dtype,
        bytes_moved=2 * tensor_bytes((rows, cols), dtype) + tensor_bytes((cols,), dtype),
    )


def pointwise_chain_60(x):
    # 60 cheap elementwise ops; the values stay bounded so float32 rounding
    # differences between fused and unfused evaluation stay tiny.
    for i in range(10):
        x = x * 0.9 + 0.1
        x = torch.sin(x)
        x = x - 0.05 * i
        x = torch.tanh(x)
        x = torch.abs(x) + 0.5
        x = torch.sqrt(x)
    return x


@workload("pointwise_chain_60", "60 chained small pointwise ops, float32, launch-bound")
def pointwise_chain_small(device, scale):
    shape = pick(device, scale, gpu=(64, 1024), cpu=(64, 1024), quick=(16, 64), tiny=(4, 4))
    dtype = torch.float32
    return Instance(
        pointwise_chain_60, randn_maker(device, dtype, shape),
        sizes={"shape": list(shape), "ops": 60}, dtype=dtype,
    )


@workload("pointwise_chain_60_large", "the same 60-op chain on a large tensor, memory-bound")
def pointwise_chain_large(device, scale):
    # 60 transcendental-heavy passes: a quarter of the other CPU sizes keeps it near a second in eager.
    shape = pick(device, scale, gpu=(32768, 4096), cpu=(1024, 1024), quick=(64, 256), tiny=(4, 16))
    dtype = torch.float32
    return Instance(
        pointwise_chain_60, randn_maker(device, dtype, shape),
        sizes={"shape": list(shape), "ops": 60}, dtype=dtype,
        bytes_moved=2 * tensor_bytes(shape, dtype),
    )


# ---------------------------------------------------------------- models

@workload("gpt_block", "a GPT-style transformer block, inference (bfloat16 on CUDA)")
def gpt_block_workload(device, scale):
    from ..models.gpt import Block, GPTConfig

    batch, seq, width, heads = pick(
        device, scale, gpu=(16, 1024, 2048, 16), cpu=(4, 128, 256, 4), quick=(2, 16, 64, 4), tiny=(1, 4, 16, 2)
    )
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    config = GPTConfig(block_size=seq, n_embd=width, n_head=heads, use_sdpa=True)
    torch.manual_seed(0)
    block = Block(config).to(device=device, dtype=dtype).eval()
    return Instance(
        block, randn_maker(device, dtype, (batch, seq, width)),
        sizes={"batch": batch, "seq": seq, "width": width, "heads": heads}, dtype=dtype,
    )


class LayerNormMLP(nn.Module):
    """A stack of Linear -> LayerNorm -> GELU layers."""

    def __init__(self, width: int, depth: int):
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()) for _ in range(depth)]
        )

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@workload("mlp_train", "an MLP of Linear+LayerNorm+GELU layers, one training step (forward+backward)")
def mlp_train_workload(device, scale):
    batch, width, depth = pick(
        device, scale, gpu=(8192, 4096, 8), cpu=(512, 512, 4), quick=(16, 64, 3), tiny=(2, 8, 2)
    )
    dtype = torch.float32
    torch.manual_seed(0)
    model = LayerNormMLP(width, depth).to(device).train()
    return Instance(
        model, randn_maker(device, dtype, (batch, width)),
        sizes={"batch": batch, "width": width, "depth": depth}, dtype=dtype, training=True,
    )


def token_maker(device: str, vocab: int, batch: int, seq: int):
    def make_inputs(seed: int):
        gen = torch.Generator(device=device).manual_seed(seed)
        return (torch.randint(0, vocab, (batch, seq), generator=gen, device=device),)

    return make_inputs


def next_token_loss(logits, inputs):
    (tokens,) = inputs
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())


@workload("gpt_bundled", "surge's bundled GPT model (GPT-2 small's shape on CUDA), inference")
def gpt_bundled_workload(device, scale):
    from ..models.gpt import GPT, GPTConfig

    batch, seq, layers, width, heads, vocab = pick(
        device, scale, gpu=(8, 1024, 12, 768, 12, 50257), cpu=(2, 128, 4, 256, 4, 8192),
        quick=(2, 16, 2, 64, 4, 512), tiny=(1, 4, 1, 16, 2, 128),
    )
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    config = GPTConfig(vocab_size=vocab, block_size=seq, n_layer=layers, n_head=heads, n_embd=width)
    torch.manual_seed(0)
    model = GPT(config).to(device=device, dtype=dtype).eval()
    return Instance(
        model, token_maker(device, vocab, batch, seq), dtype=dtype,
        sizes={"batch": batch, "seq": seq, "layers": layers, "width": width, "heads": heads, "vocab": vocab},
    )


@workload("llama_bundled", "surge's bundled Llama-style model (RMSNorm, rotary, SwiGLU), inference")
def llama_bundled_workload(device, scale):
    from ..models.llama import Llama, LlamaConfig

    batch, seq, layers, width, heads, vocab = pick(
        device, scale, gpu=(8, 1024, 8, 2048, 16, 32000), cpu=(2, 128, 2, 256, 4, 8192),
        quick=(2, 16, 2, 64, 4, 512), tiny=(1, 4, 1, 16, 2, 128),
    )
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    config = LlamaConfig(vocab_size=vocab, max_seq_len=seq, n_layer=layers, n_head=heads, dim=width,
                         hidden_dim=(width * 8 // 3 + 63) // 64 * 64)
    torch.manual_seed(0)
    model = Llama(config).to(device=device, dtype=dtype).eval()
    return Instance(
        model, token_maker(device, vocab, batch, seq), dtype=dtype,
        sizes={"batch": batch, "seq": seq, "layers": layers, "width": width, "heads": heads, "vocab": vocab},
    )


def names(suite: str = "default") -> list[str]:
    """The workloads of ``suite``, in the order the bench runs them."""
    from . import hf_workloads  # noqa: F401  (registers the transformers workloads when installed)
    from . import optimizer_workloads  # noqa: F401  (registers the optimizer steps)
    from . import overhead_workloads  # noqa: F401  (registers the launch-bound workloads)
    from . import zoo_workloads  # noqa: F401  (registers the model zoo)

    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; one of {SUITES}")
    return [name for name in WORKLOADS if SUITE_OF[name] == suite]


def build(name: str, device: str, scale: str) -> Instance:
    """The workload at this size; raises ``Unavailable`` when a library it needs is missing."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; one of {SCALES}")
    names()  # registers every suite
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; known workloads: {', '.join(WORKLOADS)}")
    return WORKLOADS[name](device, scale)
