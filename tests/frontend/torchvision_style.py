"""A small EfficientNet written with the Python constructs of torchvision's model code.

torchvision is not a test dependency, so this module writes its own blocks the way that
library's are written: a usage-logging probe that reads the logged object's module, class
and name (``__module__``, ``__class__``, ``isinstance(obj, FunctionType)``) and calls
``torch._C._log_api_usage_once`` from modules' ``__init__`` and from a stochastic-depth
function on every call, ``torch.jit.is_scripting()``/``is_tracing()`` probes,
``torch.fx.wrap`` at import, a squeeze-excitation block whose activation is a
``functools.partial`` class with ``inplace=True``, conv-norm-activation ``nn.Sequential``
subclasses, and an in-place residual add after stochastic depth.
"""
from __future__ import annotations

from functools import partial
from types import FunctionType

import torch
import torch.fx
from torch import nn


def log_usage_once(obj) -> None:
    """Records that a class or function of this library was used (a no-op unless a logger is set)."""
    if not obj.__module__.startswith(__name__.rsplit(".", 1)[0]):
        return
    label = obj.__class__.__name__
    if isinstance(obj, FunctionType):
        label = obj.__name__
    torch._C._log_api_usage_once(f"{obj.__module__}.{label}")


def drop_rows(x: torch.Tensor, p: float, mode: str, training: bool = True) -> torch.Tensor:
    """Stochastic depth: zeroes whole rows (or the whole batch) with probability ``p``."""
    if not torch.jit.is_scripting() and not torch.jit.is_tracing():
        log_usage_once(drop_rows)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"drop probability must be in [0, 1], got {p}")
    if mode not in ["batch", "row"]:
        raise ValueError(f"mode must be 'batch' or 'row', got {mode}")
    if not training or p == 0.0:
        return x
    keep = 1.0 - p
    shape = [x.shape[0]] + [1] * (x.ndim - 1) if mode == "row" else [1] * x.ndim
    mask = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(keep)
    if keep > 0.0:
        mask.div_(keep)
    return x * mask


torch.fx.wrap("drop_rows")


class DropRows(nn.Module):
    def __init__(self, p: float, mode: str):
        super().__init__()
        log_usage_once(self)
        self.p, self.mode = p, mode

    def forward(self, x):
        return drop_rows(x, self.p, self.mode, self.training)


class ConvBnAct(nn.Sequential):
    def __init__(self, cin, cout, kernel=3, stride=1, groups=1, act=nn.SiLU, inplace=True):
        layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act(**({} if inplace is None else {"inplace": inplace})))
        super().__init__(*layers)
        log_usage_once(self)
        self.out_channels = cout


class SqueezeExcite(nn.Module):
    def __init__(self, channels, squeezed, activation=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        log_usage_once(self)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)
        self.activation, self.gate = activation(), gate()

    def _scale(self, x):
        return self.gate(self.expand(self.activation(self.reduce(self.pool(x)))))

    def forward(self, x):
        return self._scale(x) * x


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, expand, stride, drop):
        super().__init__()
        self.residual = stride == 1 and cin == cout
        hidden = cin * expand
        layers = [ConvBnAct(cin, hidden, 1)] if hidden != cin else []
        layers += [ConvBnAct(hidden, hidden, 3, stride, groups=hidden),
                   SqueezeExcite(hidden, max(1, cin // 4), activation=partial(nn.SiLU, inplace=True)),
                   ConvBnAct(hidden, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.drop = DropRows(drop, "row")

    def forward(self, x):
        out = self.block(x)
        if self.residual:
            out = self.drop(out)
            out += x
        return out


class TinyEfficientNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        log_usage_once(self)
        self.features = nn.Sequential(
            ConvBnAct(3, 8, 3, 2),
            nn.Sequential(InvertedResidual(8, 8, 1, 1, 0.0)),
            nn.Sequential(InvertedResidual(8, 16, 4, 2, 0.05), InvertedResidual(16, 16, 4, 1, 0.1)),
            ConvBnAct(16, 32, 1))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(nn.Dropout(0.2, inplace=True), nn.Linear(32, classes))

    def forward(self, x):
        return self.head(torch.flatten(self.pool(self.features(x)), 1))
