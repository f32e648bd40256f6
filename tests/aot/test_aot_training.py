"""Training loops through aot_eager: 20 optimizer steps match eager's parameters."""
import copy

import pytest
import torch
import torch.fx
import torch.nn as nn

from .helpers import compile_aot


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.net(x), y)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2)
        self.head = nn.Linear(8 * 2 * 2, 5)

    def forward(self, x, y):
        h = torch.relu(self.bn(self.conv1(x)))
        h = nn.functional.max_pool2d(h, 2)
        h = torch.relu(self.conv2(h)).flatten(1)
        return nn.functional.cross_entropy(self.head(h), y)


class Block(nn.Module):
    # Sizes are fixed attributes: symbolic_trace cannot read them from proxies.
    def __init__(self, dim=16, heads=2, seq=8):
        super().__init__()
        self.heads, self.dim, self.seq = heads, dim, seq
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.register_buffer("mask", torch.ones(seq, seq).tril() == 0)

    def forward(self, x):
        t, d, hd = self.seq, self.dim, self.dim // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(-1, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / hd ** 0.5
        att = att.masked_fill(self.mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(-1, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=11, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(8, dim) * 0.02)
        self.blocks = nn.Sequential(Block(dim), Block(dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx, targets):
        h = self.blocks(self.emb(idx) + self.pos)
        logits = self.head(h)
        return nn.functional.cross_entropy(logits.view(-1, 11), targets.view(-1))


def _batches(kind, steps):
    g = torch.Generator().manual_seed(1234)
    for _ in range(steps):
        if kind == "mlp":
            yield torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        elif kind == "cnn":
            yield torch.randn(4, 3, 12, 12, generator=g), torch.randint(0, 5, (4,), generator=g)
        else:
            yield torch.randint(0, 11, (2, 8), generator=g), torch.randint(0, 11, (2, 8), generator=g)


@pytest.mark.parametrize("kind, make", [("mlp", MLP), ("cnn", SmallCNN), ("transformer", TinyTransformer)])
def test_twenty_steps_match_eager(kind, make):
    torch.manual_seed(0)
    eager = make()
    compiled_model = copy.deepcopy(eager)
    gm = torch.fx.symbolic_trace(compiled_model)
    batches = list(_batches(kind, 20))
    record = {}
    step_fn = compile_aot(gm, list(batches[0]), record=record, boxed=kind != "mlp")
    assert len(record["graphs"]) == 2           # one forward and one backward graph
    # SGD, not Adam: some gradients here are zero up to rounding (conv bias
    # before batch norm, the key bias of attention), and Adam would turn that
    # rounding noise into full-size steps.
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_c = torch.optim.SGD(gm.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches:
        for model, opt, run in ((eager, opt_e, eager), (gm, opt_c, step_fn)):
            opt.zero_grad()
            loss = run(x, y)
            loss.backward()
            opt.step()
    assert len(record["graphs"]) == 2           # no recompiles across steps
    compiled_state = dict(gm.named_parameters()) | dict(gm.named_buffers())
    eager_state = dict(eager.named_parameters()) | dict(eager.named_buffers())
    assert compiled_state.keys() == eager_state.keys()
    for name, value in eager_state.items():
        torch.testing.assert_close(compiled_state[name], value, rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"{name}: {m}")
