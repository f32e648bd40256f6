"""Frontend speed: surge vs torch.compile(backend="eager"), measured in one run.

1. Per-call overhead on a cache hit, for ``f(a, b, c, d) = a + b`` with four small
   tensors: (compiled call time - eager call time), for both compilers.
2. First-call time (capture + guards + backend "eager") of a 12-layer GPT-2-sized
   model (n_embd 768, 12 heads), written here in plain torch.

Run: python bench/frontend_overhead.py [--layers 12] [--repeats 9]
"""
from __future__ import annotations

import argparse
import math
import time
import timeit

import torch
import torch.nn as nn
import torch.nn.functional as F

import surge


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=50257, block_size=1024, n_embd=768, n_head=12, n_layer=12):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def add_two(a, b, c, d):
    return a + b


def per_call_us(fn, args, number=20000, repeats=9) -> float:
    return min(timeit.repeat(lambda: fn(*args), number=number, repeat=repeats)) / number * 1e6


def measure_overhead(repeats: int) -> dict:
    args = [torch.randn(4) for _ in range(4)]
    peer = torch.compile(add_two, backend="eager")
    ours = surge.compile(add_two, backend="eager")
    for _ in range(3):
        peer(*args)
        ours(*args)
    eager = per_call_us(add_two, args, repeats=repeats)
    peer_t = per_call_us(peer, args, repeats=repeats)
    ours_t = per_call_us(ours, args, repeats=repeats)
    return {"eager_us": eager, "torch_compile_us": peer_t, "surge_us": ours_t,
            "torch_compile_overhead_us": peer_t - eager, "surge_overhead_us": ours_t - eager,
            "ratio": (ours_t - eager) / (peer_t - eager)}


def first_call_seconds(compile_fn, model, idx) -> tuple[float, float]:
    """(first call, first call minus the fastest of three later calls = the compile cost)."""
    compiled = compile_fn(model)
    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(idx)
        first = time.perf_counter() - start
        torch.testing.assert_close(out, model(idx), rtol=1e-4, atol=1e-4)
        later = []
        for _ in range(3):
            start = time.perf_counter()
            compiled(idx)
            later.append(time.perf_counter() - start)
    return first, first - min(later)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    o = measure_overhead(args.repeats)
    print(f"per-call overhead, f(a,b,c,d)=a+b, 4 tensors of 4 floats (cache hit, backend eager):")
    print(f"  eager {o['eager_us']:.2f} us | torch.compile {o['torch_compile_us']:.2f} us "
          f"(+{o['torch_compile_overhead_us']:.2f}) | surge {o['surge_us']:.2f} us (+{o['surge_overhead_us']:.2f})")
    print(f"  surge overhead / torch.compile overhead = {o['ratio']:.3f} (target <= 0.333)")

    # One-time costs (imports torch does lazily on first meta-kernel or compile use)
    # are paid by a small warm-up model for both compilers, outside the timing.
    warm = GPT(vocab=64, block_size=16, n_embd=32, n_head=2, n_layer=1).eval()
    with torch.no_grad():
        surge.compile(warm, backend="eager")(torch.randint(0, 64, (1, 4)))
        torch.compile(warm, backend="eager")(torch.randint(0, 64, (1, 4)))
    surge.reset()
    torch.manual_seed(0)
    model = GPT(n_layer=args.layers).eval()
    idx = torch.randint(0, 50257, (1, 8))
    ours, ours_compile = first_call_seconds(lambda m: surge.compile(m, backend="eager"), model, idx)
    peer, peer_compile = first_call_seconds(lambda m: torch.compile(m, backend="eager"), model, idx)
    print(f"first call of a {args.layers}-layer GPT-2-sized model (backend eager):")
    print(f"  whole first call: torch.compile {peer:.3f} s | surge {ours:.3f} s | ratio {ours / peer:.3f}")
    print(f"  compile cost (first call - later call): torch.compile {peer_compile:.3f} s | "
          f"surge {ours_compile:.3f} s | ratio {ours_compile / peer_compile:.3f} (target <= 0.5)")


if __name__ == "__main__":
    main()
