"""nn.Modules as ML engineers write them: MLPs, residual blocks, attention with
masks, ModuleList/ModuleDict/Sequential iteration, super() calls, buffers,
train()/eval() behaviour, shared parameters and state_dicts."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import surge
from corpus_harness import Args, CounterDelta, RecordingBackend, check_fn, check_module, compare_call, randn


def tokens(i):
    return (randn(2, 5, 16),)


def flat(i):
    return (randn(4, 16),)


class MLP(nn.Module):
    def __init__(self, dim=16, hidden=32, out=8):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, out)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class SequentialMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh())

    def forward(self, x):
        return self.net(x) + x


class ResidualBlock(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = MLP(dim, 2 * dim, dim)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class DeepResidual(nn.Module):
    def __init__(self, depth=3, dim=16):
        super().__init__()
        self.blocks = nn.ModuleList([ResidualBlock(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class EnumerateLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))
        self.gates = nn.ParameterList([nn.Parameter(torch.rand(())) for _ in range(3)])

    def forward(self, x):
        hiddens = []
        for i, (layer, gate) in enumerate(zip(self.layers, self.gates)):
            x = x + gate * torch.relu(layer(x)) / (i + 1)
            hiddens.append(x)
        return x, hiddens


class HeadsByName(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({f"task_{name}": nn.Linear(16, 3) for name in ("a", "b", "c")})

    def forward(self, x):
        return {name: head(x).softmax(-1) for name, head in self.heads.items()}


class KeyedModuleDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.ModuleDict({"q": nn.Linear(16, 16), "k": nn.Linear(16, 16)})

    def forward(self, x, which="q"):
        other = "k" if which == "q" else "q"
        return self.proj[which](x) - self.proj[other](x), list(self.proj.keys())


class CausalSelfAttention(nn.Module):
    def __init__(self, dim=16, heads=4, max_len=8):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        mask = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, max_len, max_len), persistent=False)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.out(y.transpose(1, 2).contiguous().view(b, t, c))


class GPTBlock(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=11, dim=16, layers=2, max_len=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList([GPTBlock(dim) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.shape[1], dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def token_ids(i):
    return (torch.randint(0, 11, (2, 6)),)


def token_ids_and_targets(i):
    return torch.randint(0, 11, (2, 6)), torch.randint(0, 11, (2, 6))


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        return self.proj(x)

    def extra(self, x):
        return x * 2


class Derived(Base):
    def __init__(self):
        super().__init__()
        self.post = nn.Linear(16, 8)

    def forward(self, x):
        base = super().forward(x)
        return self.post(super().extra(base).relu())


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU(),
        )
        self.classifier = nn.Linear(8, 5)

    def forward(self, x):
        h = self.features(x)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def images(i):
    return (randn(2, 3, 8, 8),)


class TrainingBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = self.fc(x)
        if self.training:
            return h * 0.5
        return h.relu()


class NamedAttributes(nn.Module):
    def __init__(self):
        super().__init__()
        for i in range(3):
            setattr(self, f"fc{i}", nn.Linear(16, 16))

    def forward(self, x):
        for i in range(3):
            x = getattr(self, f"fc{i}")(x).tanh()
        return x


class ParameterRegularized(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = MLP()
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x):
        penalty = sum(p.pow(2).sum() for name, p in self.named_parameters() if "weight" in name)
        return self.fc(x) * self.scale, penalty


class SequentialSlicing(nn.Module):
    def __init__(self):
        super().__init__()
        self.stack = nn.Sequential(*[nn.Linear(16, 16) for _ in range(4)])

    def forward(self, x):
        first = self.stack[0](x)
        rest = self.stack[1:](first)
        return rest, self.stack[-1](x), len(self.stack)


class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([nn.Linear(16, 4) for _ in range(4)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class ConfiguredNorm(nn.Module):
    def __init__(self, eps=1e-5, affine=True):
        super().__init__()
        self.eps = eps
        self.affine = affine
        self.weight = nn.Parameter(torch.ones(16))
        self.bias = nn.Parameter(torch.zeros(16))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        y = (x - mean) / torch.sqrt(var + self.eps)
        if self.affine:
            y = y * self.weight + self.bias
        return y


class KwargsForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x, *, mask=None, scale=1.0):
        h = self.fc(x) * scale
        if mask is not None:
            h = h.masked_fill(mask, 0.0)
        return h


class EmbeddingBagOfWords(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 16, padding_idx=0)
        self.out = nn.Linear(16, 2)

    def forward(self, ids):
        mask = (ids != 0).unsqueeze(-1).float()
        pooled = (self.emb(ids) * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.out(pooled)


class MultiheadAttentionWrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        out, weights = self.mha(x, x, x, need_weights=True)
        return out, weights


class NestedThreeLevels(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.ModuleDict({"stem": nn.Sequential(nn.Linear(16, 16), nn.ReLU()), "body": DeepResidual(2)})

    def forward(self, x):
        return self.encoder["body"](self.encoder["stem"](x))


class BufferCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.register_buffer("running", torch.zeros(16))

    def forward(self, x):
        h = self.fc(x)
        return h + self.running


MODULE_CASES = [
    (MLP, flat),
    (SequentialMLP, flat),
    (ResidualBlock, tokens),
    (DeepResidual, tokens),
    (EnumerateLayers, flat),
    (HeadsByName, flat),
    (KeyedModuleDict, flat),
    (CausalSelfAttention, tokens),
    (GPTBlock, tokens),
    (TinyGPT, token_ids),
    (Derived, flat),
    (NamedAttributes, flat),
    (ParameterRegularized, flat),
    (SequentialSlicing, flat),
    (MultiHead, tokens),
    (ConfiguredNorm, tokens),
    (EmbeddingBagOfWords, lambda i: (torch.randint(0, 20, (3, 7)),)),
    (NestedThreeLevels, tokens),
    (BufferCounter, flat),
]


@pytest.mark.parametrize("module_cls,make_args", MODULE_CASES, ids=[c.__name__ for c, _ in MODULE_CASES])
def test_module_program(module_cls, make_args):
    check_module(module_cls(), make_args)


def test_tiny_gpt_with_targets_returns_loss():
    check_module(TinyGPT(), token_ids_and_targets)


def test_keyed_module_dict_with_keyword():
    check_module(KeyedModuleDict(), lambda i: Args(randn(4, 16), which="k"))


def test_kwargs_forward_with_mask():
    check_module(KwargsForward(), lambda i: Args(randn(4, 16), mask=torch.rand(4, 16) > 0.5, scale=2.0))


def test_conv_net_in_eval_mode():
    check_module(ConvNet().eval(), images)


def test_multihead_attention_in_eval_mode():
    check_module(MultiheadAttentionWrapper().eval(), tokens, rtol=1e-4, atol=1e-5)


def test_training_flag_switch_recompiles_and_reaches_original():
    module = TrainingBranch()
    backend = RecordingBackend()
    compiled = surge.compile(module, backend=backend)
    delta = CounterDelta()
    compare_call(compiled, module, flat(0))
    compiled.eval()
    assert module.training is False, "eval() on the compiled module must reach the original"
    compare_call(compiled, module, flat(1))
    module.train()
    assert compiled.training is True
    compare_call(compiled, module, flat(2))
    assert len(backend.graphs) == 2
    assert delta["recompiles"] == 1 and delta["cache_hits"] == 1, delta


def test_dropout_train_and_eval_behaviour():
    class Dropper(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.fc(x))

    module = Dropper()
    backend = RecordingBackend()
    compiled = surge.compile(module, backend=backend)
    x = randn(64, 16)
    with torch.no_grad():
        dense = module.fc(x)
        out = compiled(x)
    # In training mode every element is dropped or scaled by 1/(1-p).
    kept = out != 0
    assert 0.2 < kept.float().mean().item() < 0.8
    torch.testing.assert_close(out[kept], (dense * 2)[kept])
    compiled.eval()
    x = randn(64, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), module.fc(x))
    assert len(backend.graphs) == 2


def test_batchnorm_train_updates_running_stats_of_original():
    module = nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8))
    backend = RecordingBackend()
    compiled = surge.compile(module, backend=backend)
    bn = module[1]
    for i in range(2):
        x = randn(6, 16)
        mean_before = bn.running_mean.clone()
        tracked_before = int(bn.num_batches_tracked)
        out = compiled(x)
        h = module[0](x).detach()
        expected_mean = 0.9 * mean_before + 0.1 * h.mean(0)
        torch.testing.assert_close(bn.running_mean, expected_mean)
        assert int(bn.num_batches_tracked) == tracked_before + 1
        torch.testing.assert_close(out, F.batch_norm(h, None, None, bn.weight, bn.bias, training=True))
    compiled.eval()
    x = randn(6, 16)
    compare_call(compiled, module, (x,))
    assert len(backend.graphs) == 2, "batchnorm in eval mode is a different program: one recompile"


def test_compiled_module_state_dict_round_trip():
    module = DeepResidual()
    compiled = surge.compile(module, backend=RecordingBackend())
    other = DeepResidual()
    compiled.load_state_dict(other.state_dict())
    for (name, p), (_, q) in zip(module.state_dict().items(), other.state_dict().items()):
        assert torch.equal(p, q), name
    compare_call(compiled, other, tokens(0))


def test_compiled_module_attribute_falls_through():
    module = ConfiguredNorm(eps=1e-3)
    compiled = surge.compile(module)
    assert compiled.eps == 1e-3
    assert compiled.weight is module.weight
    assert dict(compiled.named_parameters()).keys() == dict(module.named_parameters()).keys()


def test_tied_weights_stay_tied():
    module = TinyGPT()
    compiled, _ = check_module(module, token_ids)
    assert module.lm_head.weight is module.wte.weight


def test_forward_hook_on_submodule_is_honoured():
    module = MLP()
    module.fc1.register_forward_hook(lambda mod, inputs, output: output * 2)
    check_module(module, flat)


def test_forward_pre_hook_on_submodule_is_honoured():
    module = DeepResidual()
    module.head.register_forward_pre_hook(lambda mod, inputs: (inputs[0] + 1,))
    check_module(module, tokens)


def test_hook_registered_after_first_call_is_honoured():
    module = MLP()
    compiled = surge.compile(module, backend=RecordingBackend())
    compare_call(compiled, module, flat(0))
    handle = module.fc2.register_forward_hook(lambda mod, inputs, output: -output)
    compare_call(compiled, module, flat(1))
    handle.remove()
    compare_call(compiled, module, flat(2))


def test_module_converted_to_double_recompiles():
    module = MLP()
    backend = RecordingBackend()
    compiled = surge.compile(module, backend=backend)
    compare_call(compiled, module, flat(0))
    module.double()
    out = compare_call(compiled, module, (randn(4, 16, dtype=torch.float64),))
    assert out.dtype == torch.float64
    assert len(backend.graphs) == 2


def test_conv_module_to_channels_last_stays_correct():
    module = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    compiled = surge.compile(module, backend=RecordingBackend())
    compare_call(compiled, module, images(0))
    module.to(memory_format=torch.channels_last)
    compare_call(compiled, module, (randn(2, 3, 8, 8).to(memory_format=torch.channels_last),))


class PlainTensorAttribute(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.temperature = torch.tensor(2.0)

    def forward(self, x):
        return self.fc(x) / self.temperature


def test_plain_tensor_attribute_reassigned():
    module = PlainTensorAttribute()
    compiled = surge.compile(module, backend=RecordingBackend())
    compare_call(compiled, module, flat(0))
    module.temperature = torch.tensor(0.5)
    compare_call(compiled, module, flat(1))


@pytest.mark.parametrize("rnn_cls", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])
def test_recurrent_layers(rnn_cls):
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = rnn_cls(16, 8, batch_first=True)
            self.out = nn.Linear(8, 3)

        def forward(self, x):
            seq, _ = self.rnn(x)
            return self.out(seq[:, -1])

    check_module(Tagger(), tokens, rtol=1e-4, atol=1e-5)


class UsesSelfMethods(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def _project(self, x, *, residual=True):
        h = self.fc(x)
        return x + h if residual else h

    def forward(self, x):
        return self._project(self._project(x), residual=False)


def test_module_calling_its_own_callee_methods():
    check_module(UsesSelfMethods(), flat)


def test_functional_dropout_follows_training_flag():
    class FunctionalDropout(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            return F.dropout(self.fc(x), p=0.5, training=self.training)

    check_module(FunctionalDropout().eval(), flat)


class ReversedAndZipped(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(4)])
        self.norms = nn.ModuleList([nn.LayerNorm(16) for _ in range(4)])

    def forward(self, x):
        for layer, norm in zip(reversed(self.layers), self.norms):
            x = norm(layer(x))
        for layer in self.layers[::-2]:
            x = x + layer(x) / len(self.layers)
        return x, self.layers[-1](x)


class VarargsForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, *inputs, **named):
        total = sum(self.proj(t) for t in inputs)
        for key in sorted(named):
            total = total + named[key].mean()
        return total


def test_reversed_sliced_and_zipped_module_lists():
    check_module(ReversedAndZipped(), flat)


def test_module_forward_with_varargs_and_kwargs():
    check_module(VarargsForward(), lambda i: Args(randn(2, 16), randn(2, 16), bias=randn(3), extra=randn(2)))


def test_tensor_layout_queries_used_in_python():
    def layout_report(x):
        strides = x.stride()
        flat_ok = x.is_contiguous()
        y = x.contiguous() if not flat_ok else x * 1
        return y, strides, x.stride(0), x.element_size(), x.nelement(), x.is_leaf, x.grad_fn is None

    check_fn(layout_report, lambda i: (randn(4, 3).t(),))
