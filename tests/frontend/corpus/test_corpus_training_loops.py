"""Compiled modules inside the loops that use them: gradient accumulation against an
eager twin, train/eval toggling across epochs, load_state_dict between calls, and
parametrized weights."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import surge
from corpus_harness import CounterDelta, RecordingBackend, compare_call, randn


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Dropout(0.3))
        self.head = nn.Linear(16, 3)

    def forward(self, x, y=None):
        logits = self.head(self.body(x))
        if y is None:
            return logits
        return logits, F.cross_entropy(logits, y)


def batch():
    return randn(6, 8), torch.randint(0, 3, (6,))


def test_gradient_accumulation_matches_eager_twin():
    model = SmallNet().eval()  # no dropout, so the two copies see the same function
    twin = copy.deepcopy(model)
    compiled = surge.compile(model, backend=RecordingBackend())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    twin_opt = torch.optim.AdamW(twin.parameters(), lr=1e-2)
    for _ in range(2):
        for o in (opt, twin_opt):
            o.zero_grad(set_to_none=True)
        for _ in range(3):
            x, y = batch()
            _, loss = compiled(x, y)
            _, twin_loss = twin(x.clone(), y.clone())
            torch.testing.assert_close(loss, twin_loss)
            (loss / 3).backward()
            (twin_loss / 3).backward()
        opt.step()
        twin_opt.step()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, msg=name)
    assert surge.counters["fallbacks"] == 0


def test_train_eval_toggling_across_epochs_reuses_two_entries():
    model = SmallNet()
    backend = RecordingBackend()
    compiled = surge.compile(model, backend=backend)
    delta = CounterDelta()
    for _ in range(3):
        compiled.train()
        x, y = batch()
        logits, loss = compiled(x, y)
        assert logits.requires_grad and loss.ndim == 0
        compiled.eval()
        with torch.no_grad():
            x, _ = batch()
            torch.testing.assert_close(compiled(x), model(x))
    # Training with labels, and evaluation without labels under no_grad: two programs.
    assert len(backend.graphs) == 2, f"{len(backend.graphs)} graphs; {delta}"
    assert delta["cache_hits"] == 4


def test_load_state_dict_between_calls_is_seen():
    model = SmallNet().eval()
    compiled = surge.compile(model, backend=RecordingBackend())
    compare_call(compiled, model, (randn(4, 8),))
    model.load_state_dict(SmallNet().state_dict())
    compare_call(compiled, model, (randn(4, 8),))
    compiled.load_state_dict(SmallNet().state_dict())
    compare_call(compiled, model, (randn(4, 8),))


def test_weight_norm_parametrization():
    layer = nn.utils.parametrizations.weight_norm(nn.Linear(8, 4))
    backend = RecordingBackend()
    compiled = surge.compile(layer, backend=backend)
    for _ in range(2):
        compare_call(compiled, layer, (randn(3, 8),))
    with torch.no_grad():
        layer.parametrizations.weight.original0.mul_(2.0)
    compare_call(compiled, layer, (randn(3, 8),))
    assert surge.counters["fallbacks"] == 0 and len(backend.graphs) == 1
