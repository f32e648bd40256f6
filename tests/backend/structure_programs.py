"""The programs whose kernel structure both code generators are held to (one kernel each, ...)."""
import torch
import torch.nn.functional as F


def gelu_linear(x, w, b, r):
    return F.gelu(x @ w + b) + r


def layer_norm_gelu(x, w, b):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))


def rms_norm(x, w):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return y.to(x.dtype) * w


def softmax(x):
    return torch.softmax(x, dim=-1)


def pointwise_chain(x, y):
    ops = [torch.sin, torch.cos, torch.tanh, torch.sigmoid, lambda v: v * 1.5, lambda v: v + y,
           torch.abs, lambda v: v - 0.25, torch.exp, lambda v: torch.clamp(v, -2, 2)]
    for k in range(60):
        x = ops[k % len(ops)](x)
    return x
