"""Which activations a training step saves: what the forward writes anyway wins ties.

The partitioner's min cut weighs each saved tensor by its bytes; a fused pointwise
intermediate (LayerNorm's ``x - mean``) weighs a little more than a tensor the
forward writes anyway (the matmul output it was computed from), and recomputing a
node weighs a little, so that of cuts with equal bytes the one that rebuilds less
in the backward wins (a residual stream is saved, not re-added from matmul outputs).
Each test also runs with both weights at zero (the plain byte cut) to show that the
weights are what makes the difference.
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import surge
import surge.aot.partition as partition

from .helpers import compile_aot

aten = torch.ops.aten
BATCH, WIDTH, DEPTH = 32, 64, 3


class LayerNormMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH), nn.GELU())
                                      for _ in range(DEPTH)])

    def forward(self, x):
        return self.layers(x)


class PreNormResidual(nn.Module):
    """x = x + Linear(LayerNorm(x)), as a transformer's residual stream."""

    def __init__(self):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(WIDTH) for _ in range(DEPTH))
        self.fcs = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH))

    def forward(self, x):
        for norm, fc in zip(self.norms, self.fcs):
            x = x + fc(norm(x))
        return x


class RMSNormResidual(nn.Module):
    """x = x + Linear(RMSNorm(x)), RMSNorm written out as Llama does."""

    def __init__(self):
        super().__init__()
        self.scales = nn.ParameterList(nn.Parameter(torch.rand(WIDTH) + 0.5) for _ in range(DEPTH))
        self.fcs = nn.ModuleList(nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(DEPTH))

    def forward(self, x):
        for scale, fc in zip(self.scales, self.fcs):
            x = x + fc(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * scale)
        return x


@pytest.fixture
def plain_byte_cut(monkeypatch):
    """The partitioner as a pure min cut over bytes (both extra weights off)."""
    monkeypatch.setattr(partition, "STORE_ONLY_FOR_SAVING", 0.0)
    monkeypatch.setattr(partition, "RECOMPUTE", 0.0)


def _compile(model):
    record = {}
    compiled = compile_aot(model, [torch.randn(BATCH, WIDTH)], record=record)
    forward, backward = record["graphs"]
    output = next(n for n in reversed(forward.graph.nodes) if n.op == "output")
    saved = list(output.args[0])[1:]          # one user value, then the saved tensors
    return compiled, saved, backward


def _targets(saved, shape):
    """Ops (or "placeholder") that made the saved tensors of ``shape``."""
    return sorted(str(n.target) if n.op == "call_function" else n.op
                  for n in saved if tuple(n.meta["val"].shape) == shape)


def _activation_bytes(saved) -> int:
    return sum(n.meta["val"].numel() * n.meta["val"].element_size() for n in saved if n.op != "placeholder")


def _check_against_eager(model, compiled):
    """Gradients as close to a float64 reference as eager's own float32 gradients are
    (a different but correct order of float32 sums is not a failure; a wrong saved value is)."""
    reference = type(model)()
    reference.load_state_dict(model.state_dict())
    exact = type(model)().double()
    exact.load_state_dict(model.state_dict())
    x = torch.randn(BATCH, WIDTH)
    grad = torch.randn(BATCH, WIDTH)
    got = torch.autograd.grad((compiled(x) * grad).sum(), list(model.parameters()))
    want = torch.autograd.grad((reference(x) * grad).sum(), list(reference.parameters()))
    truth = torch.autograd.grad((exact(x.double()) * grad.double()).sum(), list(exact.parameters()))
    for g, w, t in zip(got, want, truth):
        eager_error = (w.double() - t).abs().max().item()
        assert (g.double() - t).abs().max().item() <= 4 * eager_error + 1e-6


def test_layernorm_mlp_saves_matmul_outputs_not_centered_values():
    torch.manual_seed(0)
    model = LayerNormMLP()
    compiled, saved, _ = _compile(model)
    # per layer: the addmm output LayerNorm reads (written anyway) and its two row
    # statistics; x - mean would be one more store in each forward kernel. GELU's
    # output is the next Linear's input, which that Linear's weight gradient reads:
    # saved too (rebuilding it would take a kernel of its own), except the last layer's.
    assert _targets(saved, (BATCH, WIDTH)) == (["aten.addmm.default"] * DEPTH + ["aten.mul.Tensor"] * (DEPTH - 1)
                                               + ["placeholder"])
    assert _targets(saved, (BATCH,)) == ["aten.sum.dim_IntList"] * DEPTH + ["aten.var.correction"] * DEPTH
    assert _activation_bytes(saved) == (DEPTH * (BATCH * WIDTH + 2 * BATCH) + (DEPTH - 1) * BATCH * WIDTH) * 4
    _check_against_eager(model, compiled)


@pytest.mark.parametrize("model_type", [LayerNormMLP, PreNormResidual])
def test_plain_byte_cut_saves_centered_values(plain_byte_cut, model_type):
    # the same bytes less one statistic: the plain cut prefers the fused x - mean
    _, saved, _ = _compile(model_type())
    subs = _targets(saved, (BATCH, WIDTH)).count("aten.sub.Tensor")
    assert subs == (DEPTH if model_type is LayerNormMLP else DEPTH - 1)


def _rebuilt_residuals(backward) -> list:
    """Full-size adds in the backward of two saved tensors: a residual rebuilt."""
    saved = {n for n in backward.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangent")}
    return [n for n in backward.graph.nodes
            if n.target == aten.add.Tensor and tuple(n.meta["val"].shape) == (BATCH, WIDTH)
            and all(a in saved for a in n.all_input_nodes) and len(n.all_input_nodes) == 2]


@pytest.mark.parametrize("model_type", [PreNormResidual, RMSNormResidual])
def test_residual_stream_is_saved_not_rebuilt(model_type):
    torch.manual_seed(0)
    model = model_type()
    compiled, saved, backward = _compile(model)
    # the stream before each block (input, then the sums), each read by the backward as is,
    # and each block's normalized input, which its Linear's weight gradient reads
    norm_output = "aten.add.Tensor" if model_type is PreNormResidual else "aten.mul.Tensor"
    assert sorted(_targets(saved, (BATCH, WIDTH))) == sorted(
        ["aten.add.Tensor"] * (DEPTH - 1) + [norm_output] * DEPTH + ["placeholder"])
    assert _rebuilt_residuals(backward) == []
    _check_against_eager(model, compiled)


@pytest.mark.parametrize("model_type", [PreNormResidual, RMSNormResidual])
def test_without_recompute_weight_residuals_are_rebuilt(monkeypatch, model_type):
    # saving the stream or the matmul outputs added into it is the same bytes;
    # only the weight on recomputation tells the two apart
    monkeypatch.setattr(partition, "RECOMPUTE", 0.0)
    _, _, backward = _compile(model_type())
    assert _rebuilt_residuals(backward)


def test_rmsnorm_saves_the_row_sum_and_recomputes_only_per_row_work():
    torch.manual_seed(0)
    model = RMSNormResidual()
    compiled, saved, backward = _compile(model)
    # the reduction's [rows] result is saved (never recomputed: a row reduction in
    # the backward would read the whole row again); rsqrt of it is recomputed per row
    assert _targets(saved, (BATCH,)) == ["aten.sum.dim_IntList"] * DEPTH
    assert not any(n.target == aten.rsqrt.default for n in saved)
    assert any(n.target == aten.rsqrt.default for n in backward.graph.nodes)
    _check_against_eager(model, compiled)


@pytest.mark.parametrize("model_type", [LayerNormMLP, PreNormResidual, RMSNormResidual])
def test_weights_cost_at_most_their_margin_in_bytes(monkeypatch, model_type):
    # The weighted cut's bytes are at most its weight, at most the weight of the
    # plain cut: that cut's bytes times 1 + STORE_ONLY_FOR_SAVING at worst (plus
    # RECOMPUTE times what it recomputes, a few bytes here).
    margin = partition.STORE_ONLY_FOR_SAVING
    torch.manual_seed(0)
    _, saved, _ = _compile(model_type())
    weighted = _activation_bytes(saved)
    monkeypatch.setattr(partition, "STORE_ONLY_FOR_SAVING", 0.0)
    monkeypatch.setattr(partition, "RECOMPUTE", 0.0)
    torch.manual_seed(0)
    _, saved, _ = _compile(model_type())
    plain = _activation_bytes(saved)
    assert plain <= weighted <= plain * (1 + margin)


def test_written_tensors_cost_their_bytes_and_fused_ones_a_store_more():
    torch.manual_seed(0)
    _, saved, _ = _compile(LayerNormMLP())
    addmm = next(n for n in saved if n.target == aten.addmm.default)
    assert partition.saving_cost(addmm, True) == BATCH * WIDTH * 4
    assert partition.saving_cost(addmm, False) == BATCH * WIDTH * 4 * (1 + partition.STORE_ONLY_FOR_SAVING)
    assert partition.RECOMPUTE * 4 < partition.STORE_ONLY_FOR_SAVING   # see RECOMPUTE's comment


class CausalSelfAttention(nn.Module):
    """Attention written out: q, k^T and v are copies that the forward's bmms read."""

    def __init__(self, dim=16, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).tril().logical_not(), float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.out(y.transpose(1, 2).contiguous().view(b, t, c))


def test_saved_matmul_operands_reach_the_backward_in_their_layout(tmp_path):
    # The cut saves the bmm operands (written anyway; the backward's bmms read them
    # too) instead of re-copying them from the qkv output. The C++ forward stores
    # k^T transposed for its bmm; the saved tensor must still have the layout the
    # backward was compiled for, or the qkv gradients come out wrong.
    torch.manual_seed(0)
    model = CausalSelfAttention()
    reference = CausalSelfAttention()
    reference.load_state_dict(model.state_dict())
    compiled = surge.compile(model, backend="cpp", options={"cache_dir": str(tmp_path)})
    x = torch.randn(2, 5, 16)
    got = torch.autograd.grad(compiled(x).square().sum(), list(model.parameters()))
    want = torch.autograd.grad(reference(x).square().sum(), list(reference.parameters()))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
