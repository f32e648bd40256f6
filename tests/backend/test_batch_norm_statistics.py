"""Batch-norm statistics of training graphs split across programs (lowering/split_reduction.py).

A training batch norm reduces each channel over N, H and W: the mean and variance in the
forward, the sums of the gradient and of gradient * (x - mean) in the backward. Channels-last
makes these column reductions over few columns (64-512 channels) and NCHW makes them
strided reductions over few rows; unsplit, a GPU runs them in a handful of programs. Here the
split's GPU rule is switched on for CPU tensors (a target that fills programs, or
``splits_columns`` patched where the driver builds the target) and the split threshold, an
option, is lowered so that tiny tensors split.
"""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn as nn

import surge
from surge.aot.compile import aot_compile
from surge.lowering import split_reduction
from surge.lowering.lower import lower_graph
from surge.options import CompileConfig
from surge.schedule import schedule_graph
from surge.target import triton_target

THRESHOLD = 64
SMALL_SPLITS = CompileConfig(split_reduction_min_elements=THRESHOLD)
GPU_LIKE = dataclasses.replace(triton_target("cpu", interpreted=True), splits_column_reductions=True)


class _ConvBnRelu(nn.Module):
    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def _input(channels_last: bool) -> torch.Tensor:
    x = torch.randn(2, 3, 8, 8)
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _training_graphs(channels_last: bool) -> list:
    """surge's forward and backward ATen graphs of one training step, with their inputs."""
    graphs = []

    def grab(gm, inputs):
        graphs.append((gm, inputs))
        return gm

    x = _input(channels_last).requires_grad_()
    compiled = aot_compile(torch.fx.symbolic_trace(_ConvBnRelu()), [x], fw_compiler=grab, bw_compiler=grab)
    out = compiled(x)
    (out[0] if isinstance(out, (list, tuple)) else out).sum().backward()
    return graphs


def _reductions(gm, inputs, target, config) -> list:
    graph, _ = lower_graph(gm, inputs, target=target, config=config)
    return [k for k in schedule_graph(graph).kernels if k.is_reduction]


@pytest.mark.parametrize("channels_last", [True, False])
def test_statistics_split_into_partials_and_their_merge(channels_last):
    (forward, fw_inputs), (backward, bw_inputs) = _training_graphs(channels_last)
    for gm, inputs in ((forward, fw_inputs), (backward, bw_inputs)):
        stages = _reductions(gm, inputs, GPU_LIKE, SMALL_SPLITS)
        # the forward's mean and variance (and the backward's two sums) share both stages: one
        # pass over the data into per-chunk partials, then one kernel merging them per channel
        assert len(stages) == 2, [str(k) for k in stages]
        first, second = stages
        chunks = first.x_ranges[0] if channels_last else first.x_ranges[1]
        assert int(chunks) >= 2 and int(first.r_ranges[0]) * int(chunks) == 2 * 8 * 8
        # channels-last partials are [chunks, channels]: both stages read along the channels
        assert first.x_ranges[1 if channels_last else 0] == 8
        assert second.x_ranges == (8,) and second.r_ranges == (chunks,)
    # the forward's merge kernel also updates the running statistics (its epilogue)
    assert len(_reductions(forward, fw_inputs, GPU_LIKE, SMALL_SPLITS)[1].nodes) > 2


def test_rows_shorter_than_the_threshold_split_only_where_the_target_fills_programs():
    (forward, inputs), _ = _training_graphs(channels_last=True)
    config = CompileConfig(split_reduction_min_elements=256)   # above a channel's 128 elements
    assert len(_reductions(forward, inputs, GPU_LIKE, config)) == 2
    cpu_like = dataclasses.replace(GPU_LIKE, splits_column_reductions=False)
    stages = _reductions(forward, inputs, cpu_like, config)
    assert len(stages) == 1 and stages[0].x_ranges == (8,), [str(k) for k in stages]


def test_default_plans_at_resnet_sizes():
    # NCHW (16, 64, 56, 56): 64 rows of 50176 elements, under the per-row threshold, but
    # 3.2M elements in all: 8 chunks a row, 512 programs, on a target that fills programs
    threshold = split_reduction.SPLIT_REDUCTION_MIN_ELEMENTS
    assert split_reduction.plan_split(64, 50176, threshold, fills_programs=True) == (8, 6272)
    assert split_reduction.plan_split(64, 50176, threshold) is None
    assert split_reduction.plan_split(512, 784, threshold, fills_programs=True) is None   # rows enough
    # channels-last: one column tile of 64 channels, 224 chunks of 224 pixels
    assert split_reduction.plan_column_split(64, 50176) == (224, 224)


@pytest.fixture
def gpu_like_splits(monkeypatch):
    monkeypatch.setattr(split_reduction, "splits_columns", lambda target: True)


@pytest.mark.parametrize("backend,channels_last", [("triton", True), ("triton", False), ("cpp", True)])
def test_split_statistics_train_as_eager(backend, channels_last, gpu_like_splits, monkeypatch):
    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.manual_seed(0)
    model = _ConvBnRelu()
    reference = copy.deepcopy(model)
    x = _input(channels_last)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled = surge.compile(model, backend=backend, options={"split_reduction_min_elements": THRESHOLD,
                                                              "graph_cache": False})
    surge.counters.reset()
    out = compiled(xa)
    out.square().mean().backward()
    expected = reference(xb)
    expected.square().mean().backward()
    assert surge.counters["fallbacks"] == 0
    # each direction: the statistics' two stages, the elementwise kernel and one more (the
    # step counter forward, the recomputed ReLU mask backward); unsplit, one stage each
    assert surge.counters["kernels"] == 8
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-4, atol=1e-4)
    assert xa.grad.stride() == xb.grad.stride()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(model.bn.running_mean, reference.bn.running_mean)
    torch.testing.assert_close(model.bn.running_var, reference.bn.running_var)


@pytest.mark.parametrize("target", [GPU_LIKE, dataclasses.replace(GPU_LIKE, splits_column_reductions=False)])
def test_running_statistics_are_stored_into_the_buffers_by_the_reduction_kernel(target):
    (forward, inputs), _ = _training_graphs(channels_last=True)
    graph, _ = lower_graph(forward, inputs, target=target, config=SMALL_SPLITS)
    schedule = schedule_graph(graph)
    # running mean and variance (per-channel values of the statistics' last kernel) and the
    # step counter go straight into the module's buffers: no copy per buffer after the kernels
    assert [str(e.buffer.op) for e in schedule.externs] == ["aten.convolution.default"]
    assert len(schedule.input_stores) == 3
