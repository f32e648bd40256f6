"""Whole small programs as ML engineers write them: rotary embeddings, MoE routing,
masked cross-attention, hand-written losses and metrics dicts, a hand-written
optimizer step, a KV-cache update, patch embeddings, a U-Net style skip block."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_harness import Args, check_fn, check_module, randn


def rotary_embedding(q, k):
    t, d = q.shape[-2], q.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    angles = torch.outer(torch.arange(t).float(), inv_freq)
    cos, sin = angles.cos(), angles.sin()

    def rotate(x):
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    return rotate(q), rotate(k)


def sinusoidal_positions(x):
    t, d = x.shape[1], x.shape[2]
    position = torch.arange(t).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
    pe = torch.zeros(t, d)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return x + pe


def cross_attention(queries, memory, key_padding_mask=None, heads=2):
    b, tq, d = queries.shape
    tk = memory.shape[1]
    q = queries.view(b, tq, heads, d // heads).transpose(1, 2)
    k = memory.view(b, tk, heads, d // heads).transpose(1, 2)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d // heads)
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    weights = scores.softmax(-1)
    return (weights @ k).transpose(1, 2).reshape(b, tq, d), weights


def cross_attention_args(with_mask):
    def make(i):
        mask = None
        if with_mask:
            mask = torch.zeros(2, 6, dtype=torch.bool)
            mask[:, -2:] = True
        return Args(randn(2, 3, 8), randn(2, 6, 8), key_padding_mask=mask)

    return make


def top2_moe_routing(x, gate_w, expert_ws):
    logits = x @ gate_w
    weights, chosen = logits.softmax(-1).topk(2, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e, w in enumerate(expert_ws):
        routed = (chosen == e).float()
        gate = (routed * weights).sum(-1, keepdim=True)
        out = out + gate * F.silu(x @ w)
    return out, chosen


def moe_args(i):
    return randn(5, 8), randn(8, 4), [randn(8, 8) for _ in range(4)]


def losses_and_metrics(logits, targets, smoothing=0.1):
    n_classes = logits.shape[-1]
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    smooth = -log_probs.mean(-1)
    loss = ((1 - smoothing) * nll + smoothing * smooth).mean()
    accuracy = (logits.argmax(-1) == targets).float().mean()
    metrics = {f"loss/{name}": value for name, value in (("total", loss), ("nll", nll.mean()))}
    metrics["acc"] = accuracy
    metrics["classes"] = n_classes
    return metrics


def loss_args(i):
    return randn(6, 5), torch.randint(0, 5, (6,))


def contrastive_loss(a, b, temperature=0.07):
    a = F.normalize(a, dim=-1)
    b = F.normalize(b, dim=-1)
    sims = a @ b.t() / temperature
    labels = torch.arange(a.shape[0])
    return (F.cross_entropy(sims, labels) + F.cross_entropy(sims.t(), labels)) / 2


def sgd_momentum_step(params, grads, bufs, lr=0.1, momentum=0.9):
    with torch.no_grad():
        for p, g, buf in zip(params, grads, bufs):
            buf.mul_(momentum).add_(g)
            p.add_(buf, alpha=-lr)
    return len(params)


def sgd_args(i):
    return [randn(3, 2) for _ in range(3)], [randn(3, 2) for _ in range(3)], [randn(3, 2) for _ in range(3)]


def kv_cache_update(cache_k, cache_v, k, v, pos):
    cache_k[:, :, pos : pos + k.shape[2]] = k
    cache_v[:, :, pos : pos + v.shape[2]] = v
    end = pos + k.shape[2]
    return cache_k[:, :, :end], cache_v[:, :, :end]


def kv_args(i):
    return Args(torch.zeros(1, 2, 8, 4), torch.zeros(1, 2, 8, 4), randn(1, 2, 1, 4), randn(1, 2, 1, 4), 3)


def patch_embedding(images, proj):
    b, c, h, w = images.shape
    p = 4
    patches = images.unfold(2, p, p).unfold(3, p, p)
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(b, (h // p) * (w // p), c * p * p)
    cls = torch.zeros(b, 1, proj.shape[1])
    return torch.cat([cls, patches @ proj], dim=1)


def patch_args(i):
    return randn(2, 3, 8, 8), randn(48, 16)


def gelu_tanh_by_hand(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def masked_mean_pooling(hidden, mask):
    mask = mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * mask).sum(1)
    counts = mask.sum(1).clamp(min=1e-9)
    return summed / counts


def pooling_args(i):
    return randn(2, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])


CASES = [
    (rotary_embedding, lambda i: (randn(2, 5, 8), randn(2, 5, 8))),
    (sinusoidal_positions, lambda i: (randn(2, 5, 8),)),
    (cross_attention, cross_attention_args(with_mask=False)),
    (cross_attention, cross_attention_args(with_mask=True)),
    (top2_moe_routing, moe_args),
    (losses_and_metrics, loss_args),
    (contrastive_loss, lambda i: (randn(4, 8), randn(4, 8))),
    (sgd_momentum_step, sgd_args),
    (kv_cache_update, kv_args),
    (patch_embedding, patch_args),
    (gelu_tanh_by_hand, lambda i: (randn(4, 8),)),
    (masked_mean_pooling, pooling_args),
]


@pytest.mark.parametrize(
    "program,make_args", CASES, ids=[f"{fn.__name__}-{n}" for n, (fn, _) in enumerate(CASES)]
)
def test_ml_program(program, make_args):
    check_fn(program, make_args, rtol=1e-4, atol=1e-5)


class UNetBlock(nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        self.down = nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1)
        self.mid = nn.Conv2d(2 * channels, 2 * channels, 3, padding=1)
        self.up = nn.Conv2d(3 * channels, channels, 3, padding=1)
        self.norm = nn.GroupNorm(2, channels)

    def forward(self, x):
        skip = x
        h = F.silu(self.down(x))
        h = F.silu(self.mid(h)) + h
        h = F.interpolate(h, scale_factor=2, mode="nearest")
        return self.norm(self.up(torch.cat([h, skip], dim=1)))


def test_unet_block():
    check_module(UNetBlock(), lambda i: (randn(2, 4, 8, 8),), rtol=1e-4, atol=1e-5)


class Classifier(nn.Module):
    """Encoder + head + loss in one forward, returning a dict as training loops expect."""

    def __init__(self, vocab=20, dim=16, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.encoder = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.LayerNorm(dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, ids, labels=None):
        mask = ids != 0
        h = self.encoder(self.embed(ids))
        pooled = masked_mean_pooling(h, mask)
        logits = self.head(pooled)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


def test_classifier_with_loss_dict():
    check_module(Classifier(), lambda i: (torch.randint(0, 20, (4, 6)), torch.randint(0, 3, (4,))))
