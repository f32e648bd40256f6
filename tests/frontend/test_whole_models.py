"""Whole models: a small GPT written in plain torch, captured in one graph."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from frontend_helpers import compile_strict, same


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        return self.out((att @ v).transpose(1, 2).reshape(B, T, C))


class GPT(nn.Module):
    def __init__(self, vocab=32, dim=16, heads=2, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(16, dim)
        self.layers = nn.ModuleList(
            nn.ModuleDict({"ln1": nn.LayerNorm(dim), "attn": Attention(dim, heads), "ln2": nn.LayerNorm(dim),
                           "mlp": nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))})
            for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for layer in self.layers:
            x = x + layer["attn"](layer["ln1"](x))
            x = x + layer["mlp"](layer["ln2"](x))
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_gpt_forward_loss_and_training_step():
    model = GPT()
    compiled, rec = compile_strict(model, fullgraph=True)
    for _ in range(2):
        idx, targets = torch.randint(0, 32, (2, 8)), torch.randint(0, 32, (2, 8))
        same(compiled(idx, targets), model(idx, targets))
    same(compiled(idx), model(idx))
    assert len(rec.graphs) == 2  # with and without targets
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.1)
    before = model.head.weight.detach().clone()
    compiled(idx, targets)[1].backward()
    optimizer.step()
    assert not torch.equal(before, model.head.weight)
    assert model.head.weight is model.wte.weight
    same(compiled(idx, targets), model(idx, targets))
    assert len(rec.graphs) == 2


def test_gpt_block_from_the_readme():
    def block(x, w, b, r):
        return F.gelu(x @ w + b) + r

    compiled, rec = compile_strict(block)
    args = [torch.randn(16, 16) for _ in range(4)]
    same(compiled(*args), block(*args))
    assert rec.ops() == ["matmul", "add", "gelu", "add"]
