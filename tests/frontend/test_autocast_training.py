"""Training code under ``torch.autocast``: captured whole, as torch.compile captures it.

The ops inside an autocast block learn their result dtype from a run on meta tensors
that report their real device; those tensors must carry autograd history as the real
ones do (an in-place op on an intermediate is legal) and tensors that ops create on
the real device inside that run must stay metadata.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import surge
from surge.frontend.variables.autocast import run_under_autocast

from frontend_helpers import compile_strict


def _counts(before):
    return {k: surge.counters[k] - before.get(k, 0) for k in ("graphs", "graph_breaks", "fallbacks", "recompiles")}


class ConvReluInplace(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x, enabled):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            y = self.act(self.conv(x)) * 3
            y.add_(1)  # an in-place op on an op's result, not on a module's
            return y.float().sum()


@pytest.mark.parametrize("enabled", [False, True])
def test_inplace_op_on_an_intermediate_inside_autocast_with_grad(enabled):
    torch.manual_seed(0)
    model = ConvReluInplace()
    compiled, recorder = compile_strict(model)
    before = dict(surge.counters)
    for _ in range(2):
        x = torch.randn(2, 3, 8, 8)
        loss = compiled(x, enabled)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        ref = model(x, enabled)
        ref.backward()
        tol = {"atol": 2e-2, "rtol": 2e-2} if enabled else {}
        torch.testing.assert_close(loss, ref, **tol)
        for g, p in zip(grads, model.parameters()):
            torch.testing.assert_close(g, p.grad, **tol)
        model.zero_grad(set_to_none=True)
    assert _counts(before) == {"graphs": 1, "graph_breaks": 0, "fallbacks": 0, "recompiles": 0}
    assert "relu_" in " ".join(recorder.ops()) or "relu" in " ".join(recorder.ops())


def test_autocast_intermediates_are_not_leaves_after_the_block():
    """A tensor made inside the block and modified in place after it (its metadata came
    from the autocast run)."""
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
        y.add_(1)
        return y.relu_().sum()

    compiled, recorder = compile_strict(f)
    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
    loss = compiled(x, w)
    loss.backward()
    grad = w.grad.clone()
    w.grad = None
    f(x, w).backward()
    torch.testing.assert_close(grad, w.grad, atol=2e-2, rtol=2e-2)
    assert len(recorder.graphs) == 1 and surge.counters["graph_breaks"] == 0


def test_inplace_op_on_a_leaf_inside_autocast_is_refused_as_eager_refuses():
    def f(w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return w.relu_()

    w = torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        f(w)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        surge.compile(f, backend="eager")(w)


# ---- tensors that ops create on their inputs' device ------------------------------

def _cpu_block():
    from surge.frontend.variables.autocast import AutocastContextVariable, make_state

    return AutocastContextVariable(make_state("cpu", torch.bfloat16, True, True))


CUDA = torch.device("cuda", 0)  # reported by the metadata tensors only: no GPU is used


@pytest.mark.parametrize("op", [
    lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True),
    lambda q: torch.where(q > 0, q, 0.0),
    lambda q: torch.zeros_like(q).new_ones(3) + 1,
])
def test_ops_creating_tensors_on_a_reported_device_stay_metadata(op):
    """Composite ops build tensors on ``query.device`` (the causal mask, a wrapped scalar):
    with the metadata tensors reporting cuda, those must be metadata too, not real tensors
    on a device that then meet meta tensors. (Without grad: autograd on a tensor that
    reports cuda needs a CUDA build; the GPU test below covers training.)"""
    q = torch.empty(2, 2, 4, 8, device="meta")
    out = run_under_autocast([_cpu_block()], lambda a, k: op(*a, **k), (q,), {}, [CUDA])
    expected = op(torch.empty(2, 2, 4, 8, device="meta"))
    assert out.device.type == "meta" and out.shape == expected.shape and out.dtype == expected.dtype


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sdpa_and_where_on_cuda_inside_autocast_training():
    def f(q, w):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = q @ w
            h = F.scaled_dot_product_attention(h, h, h, is_causal=True)
            h = torch.where(h > 0, h, 0.0) + torch.zeros(h.shape[-1], device=h.device)
            return h.float().sum()

    w = torch.randn(8, 8, device="cuda", requires_grad=True)
    compiled = surge.compile(f, backend="eager")
    before = dict(surge.counters)
    for _ in range(2):
        q = torch.randn(2, 2, 4, 8, device="cuda")
        loss = compiled(q, w)
        loss.backward()
        grad = w.grad.clone()
        w.grad = None
        ref = f(q, w)
        ref.backward()
        torch.testing.assert_close(loss, ref, atol=5e-2, rtol=2e-2)
        torch.testing.assert_close(grad, w.grad, atol=5e-2, rtol=2e-2)
        w.grad = None
    assert _counts(before) == {"graphs": 1, "graph_breaks": 0, "fallbacks": 0, "recompiles": 0}


# ---- one training step of a small model under autocast, end to end ------------------

BF16 = {"atol": 3e-2, "rtol": 3e-2}


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.features(x))


def _small_bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertForSequenceClassification(config)


def _convnet_batch():
    return (torch.randn(2, 3, 8, 8),), torch.randint(0, 10, (2,))


def _bert_batch():
    ids = torch.randint(0, 64, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    return (ids, mask), torch.randint(0, 3, (2,))


def _logits(out):
    return out if isinstance(out, torch.Tensor) else out.logits


def _step_in_frame(model, inputs, labels):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = _logits(model(*inputs))
    return F.cross_entropy(logits.float(), labels)


@pytest.mark.parametrize("build,batch", [(SmallConvNet, _convnet_batch), (_small_bert, _bert_batch)],
                         ids=["convnet", "bert"])
@pytest.mark.parametrize("where", ["block_in_frame", "caller_block"])
def test_one_training_step_under_autocast_is_one_graph(build, batch, where):
    """``where``: the autocast block inside the compiled step, or around a call of the
    compiled model (as training loops write it)."""
    torch.manual_seed(0)
    model = build().train()
    reference = build().train()
    reference.load_state_dict(model.state_dict())
    if where == "block_in_frame":
        compiled = surge.compile(_step_in_frame, backend="aot_eager")
        step = lambda m, inputs, labels: compiled(m, inputs, labels)  # noqa: E731
    else:
        compiled_model = surge.compile(model, backend="aot_eager")

        def step(m, inputs, labels):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = _logits(compiled_model(*inputs))
            return F.cross_entropy(logits.float(), labels)

    before = dict(surge.counters)
    for _ in range(2):  # the second step is a cache hit on fresh inputs
        inputs, labels = batch()
        loss = step(model, inputs, labels)
        loss.backward()
        ref = _step_in_frame(reference, inputs, labels)
        ref.backward()
        torch.testing.assert_close(loss, ref, **BF16)
        for (name, p), r in zip(model.named_parameters(), reference.parameters()):
            assert p.grad is not None, name
            torch.testing.assert_close(p.grad, r.grad, **BF16, msg=name)
        for (name, b), r in zip(model.named_buffers(), reference.buffers()):
            torch.testing.assert_close(b, r, **BF16, msg=name)  # batchnorm running statistics
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
    assert _counts(before) == {"graphs": 1, "graph_breaks": 0, "fallbacks": 0, "recompiles": 0}
