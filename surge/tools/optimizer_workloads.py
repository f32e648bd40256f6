"""Optimizer-step workloads: ``opt.step()`` of torch.optim over a model-sized parameter list.

The parameters have the shapes of GPT-2 small (124M values, 148 tensors) on CUDA,
smaller ones elsewhere; gradients are fixed random tensors, attached to each
contender's own copy. One call is one optimizer step, so a call's results depend on
the steps before it: the bench times these workloads without comparing them with
eager (``Instance.stateful``); tests/integration/test_optimizer_step.py checks the
values of each step against eager.
"""
from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn as nn

from .workloads import Instance, pick, workload


def gpt2_parameter_shapes(layers: int, width: int, vocab: int, positions: int) -> list[tuple]:
    """GPT-2's parameters (tied embedding and head): embeddings, per layer two LayerNorms,
    attention and MLP weights and biases, the final LayerNorm."""
    shapes = [(vocab, width), (positions, width)]
    for _ in range(layers):
        shapes += [(width,), (width,), (width, 3 * width), (3 * width,), (width, width), (width,),
                   (width,), (width,), (width, 4 * width), (4 * width,), (4 * width, width), (width,)]
    return shapes + [(width,), (width,)]


class OptimizerStep(nn.Module):
    """Parameters, their gradients (buffers) and an optimizer; ``forward()`` takes one step."""

    def __init__(self, shapes, make_optimizer, device):
        super().__init__()
        gen = torch.Generator(device=device).manual_seed(0)
        self.params = nn.ParameterList(
            [nn.Parameter(torch.randn(s, generator=gen, device=device) * 0.02) for s in shapes])
        for k, p in enumerate(self.params):
            self.register_buffer(f"grad_{k}", torch.randn(p.shape, generator=gen, device=device))
        self.opt = make_optimizer(self.params.parameters())

    def attach_grads(self) -> None:
        for k, p in enumerate(self.params):
            p.grad = getattr(self, f"grad_{k}")

    def forward(self):
        self.opt.step()


@dataclasses.dataclass
class OptimizerInstance(Instance):
    def fresh_target(self):
        target = copy.deepcopy(self.target)   # its own parameters and optimizer state
        target.attach_grads()
        return target


def _adamw_step(device, scale, foreach):
    layers, width, vocab, positions = pick(
        device, scale, gpu=(12, 768, 50257, 1024), cpu=(2, 256, 8192, 256), quick=(1, 64, 512, 64),
        tiny=(1, 16, 64, 16))
    shapes = gpt2_parameter_shapes(layers, width, vocab, positions)
    numel = sum(torch.Size(s).numel() for s in shapes)
    target = OptimizerStep(shapes, lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, foreach=foreach),
                           device)
    # per element: read parameter, gradient and both moments, write parameter and moments
    return OptimizerInstance(target, lambda seed: (), dtype=torch.float32, stateful=True,
                             sizes={"tensors": len(shapes), "parameters": numel, "layers": layers, "width": width},
                             bytes_moved=7 * 4 * numel)


@workload("adamw_step", "AdamW's step over GPT-2 small's parameters (fp32; torch's default foreach choice)")
def adamw_step_workload(device, scale):
    return _adamw_step(device, scale, foreach=None)


@workload("adamw_step_single", "AdamW's step over GPT-2 small's parameters, foreach=False (one tensor at a time)")
def adamw_step_single_workload(device, scale):
    return _adamw_step(device, scale, foreach=False)
