"""Optimizer-step workloads: ``opt.step()`` of torch.optim over a model-sized parameter list.

The parameters have the shapes of GPT-2 small (124M values, 148 tensors) on CUDA,
smaller ones elsewhere. The inputs are the gradients (random, one set per seed): a call
attaches them to the parameters (outside the compiled step, as a backward would have
left them; only when they changed, so timed calls check identities) and takes one
optimizer step, whose result is the parameters. A call's results depend on the steps
before it (``Instance.stateful``): the bench compares a contender's check call with one
eager step from a copy of that contender's state; tests/integration/test_optimizer_step.py
checks every step of several against eager.
"""
from __future__ import annotations

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
    """Parameters and an optimizer; ``forward()`` takes one step with the attached gradients."""

    def __init__(self, shapes, make_optimizer, device):
        super().__init__()
        gen = torch.Generator(device=device).manual_seed(0)
        self.params = nn.ParameterList(
            [nn.Parameter(torch.randn(s, generator=gen, device=device) * 0.02) for s in shapes])
        self.opt = make_optimizer(self.params.parameters())

    def attach(self, grads) -> None:
        for p, g in zip(self.params, grads):
            if p.grad is not g:
                p.grad = g

    def forward(self, *grads):
        # The caller attaches the gradients (``OptimizerInstance.run``, outside the compiled
        # step); they are accepted so that the target is called like any workload's.
        self.opt.step()


@dataclasses.dataclass
class OptimizerInstance(Instance):
    """A step of a contender's own copy (its parameters and optimizer state)."""

    def run(self, compiled, target, inputs):
        target.attach(inputs)
        with torch.no_grad():
            compiled()
        return list(target.params)


def _grad_maker(shapes, device):
    def make_inputs(seed: int):
        gen = torch.Generator(device=device).manual_seed(seed)
        return tuple(torch.randn(s, generator=gen, device=device) for s in shapes)
    return make_inputs


def _adamw_step(device, scale, foreach):
    layers, width, vocab, positions = pick(
        device, scale, gpu=(12, 768, 50257, 1024), cpu=(2, 256, 8192, 256), quick=(1, 64, 512, 64),
        tiny=(1, 16, 64, 16))
    shapes = gpt2_parameter_shapes(layers, width, vocab, positions)
    numel = sum(torch.Size(s).numel() for s in shapes)
    target = OptimizerStep(shapes, lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, foreach=foreach),
                           device)
    # per element: read parameter, gradient and both moments, write parameter and moments
    return OptimizerInstance(target, _grad_maker(shapes, device), dtype=torch.float32, stateful=True,
                             sizes={"tensors": len(shapes), "parameters": numel, "layers": layers, "width": width},
                             bytes_moved=7 * 4 * numel)


@workload("adamw_step", "AdamW's step over GPT-2 small's parameters (fp32; torch's default foreach choice)")
def adamw_step_workload(device, scale):
    return _adamw_step(device, scale, foreach=None)


@workload("adamw_step_single", "AdamW's step over GPT-2 small's parameters, foreach=False (one tensor at a time)")
def adamw_step_single_workload(device, scale):
    return _adamw_step(device, scale, foreach=False)
