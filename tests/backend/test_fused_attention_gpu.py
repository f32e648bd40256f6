"""On a CUDA device: compiled attention calls the fused kernel eager calls, forward and backward.

ATen's chooser picks cuDNN, flash, memory-efficient attention or the math form from the
arguments' sizes, strides, dtypes and grad mode; tracing runs the same chooser on the tracer's
tensors, so a compiled graph holds the op eager runs on the same arguments. Each case records
the attention ops (``_scaled_dot_product_*``, their backwards) that eager and the compiled
function run, and compares them and the results:

- a BERT-style padding mask (some keys hidden), and the mask transformers builds for BERT
  while compiled when nothing is padded (``q_idx >= 0``, expanded: stride 0 in its last
  dimension, which every fused kernel refuses): compiled, that call runs the op eager runs
  with no mask, not the math form;
- causal attention, grouped-query attention;
- a GPT with ``use_sdpa=True`` over sequence lengths: one dynamic graph for all, with no
  compile per concrete size (``static_fallbacks``), forward and training.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import surge

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

BF16 = dict(atol=3e-2, rtol=3e-2)
B, H, L, D = 2, 8, 256, 64


class AttentionOps(TorchDispatchMode):
    """The names of the attention ops called while active (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if "attention" in name:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def fresh(inputs, training):
    return [t.detach().clone().requires_grad_(training and t.is_floating_point()) for t in inputs]


def run(fn, inputs, training):
    """``fn``'s output, and the gradients of its inputs (training)."""
    out = fn(*inputs)
    if not training:
        return out, []
    out.float().square().sum().backward()
    return out, [t.grad for t in inputs if t.grad is not None]


def attention_ops(fn, inputs, training) -> tuple[list, list]:
    """(forward ops, backward ops) of one call of ``fn``, and of its backward when training."""
    forward, backward = AttentionOps(), AttentionOps()
    with forward:
        out = fn(*inputs)
    if training:
        with backward:
            out.float().square().sum().backward()
    return forward.ops, backward.ops


def check_against_eager(fn, make_inputs, training, reference=None):
    """Compiled ``fn`` calls the attention ops ``reference`` (default ``fn``) calls eagerly,
    which are fused ones, and returns eager's results and gradients."""
    compiled = surge.compile(fn, backend="triton")
    inputs = make_inputs()
    compiled(*fresh(inputs, training))   # compiled before the recording
    want = attention_ops(reference or fn, fresh(inputs, training), training)
    got = attention_ops(compiled, fresh(inputs, training), training)
    assert surge.counters["fallbacks"] == 0 and surge.counters["graphs"] == 1
    assert got == want, (got, want)
    assert want[0] and "_scaled_dot_product_attention_math" not in want[0]
    assert bool(want[1]) == training, "the backward's attention op is recorded"
    (expected, expected_grads), (actual, actual_grads) = (run(f, fresh(inputs, training), training)
                                                          for f in (fn, compiled))
    torch.testing.assert_close(actual, expected, **BF16)
    torch.testing.assert_close(actual_grads, expected_grads, **BF16)
    return got


def _rand(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def qkv(heads=H, kv_heads=H):
    return [_rand(B, heads, L, D), _rand(B, kv_heads, L, D), _rand(B, kv_heads, L, D)]


def padded(q, k, v, lengths):
    """BERT's padding mask: keys past each sequence's length hidden from every query."""
    keep = torch.arange(k.shape[-2], device=k.device)[None, :] < lengths[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :].expand(-1, 1, q.shape[-2], -1))


def nothing_hidden(q, k, v):
    q_idx = torch.arange(q.shape[-2], device=q.device)[None, None, :, None]
    mask = (q_idx >= 0).expand(q.shape[0], -1, q.shape[-2], k.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def no_mask(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def grouped(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_a_padding_mask_runs_eagers_fused_op(training):
    lengths = torch.tensor([L, L - 37], device="cuda")
    check_against_eager(padded, lambda: qkv() + [lengths], training)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_a_mask_hiding_nothing_runs_the_op_eager_runs_without_it(training):
    ops = check_against_eager(nothing_hidden, qkv, training, reference=no_mask)
    assert "_scaled_dot_product_attention_math" not in ops[0]


@pytest.mark.parametrize("fn", [causal, grouped], ids=["causal", "grouped_query"])
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_causal_and_grouped_query_attention_run_eagers_fused_op(fn, training):
    make = (lambda: qkv(H, 2)) if fn is grouped else qkv
    check_against_eager(fn, make, training)


def _gpt(training):
    from surge.models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    config = GPTConfig(vocab_size=1024, block_size=512, n_layer=2, n_head=4, n_embd=256, use_sdpa=True)
    model = GPT(config).cuda().train(training)
    return model if training else model.to(torch.bfloat16)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_gpt_with_sdpa_compiles_one_dynamic_graph_over_lengths(training):
    model = _gpt(training)
    compiled = surge.compile(model, backend="triton")
    kernels = None
    for k, length in enumerate((96, 160, 224, 77, 301)):
        idx = torch.randint(0, 1024, (2, length), device="cuda")
        with torch.autocast("cuda", torch.bfloat16, enabled=training), torch.set_grad_enabled(training):
            expected, actual = model(idx), compiled(idx)
        torch.testing.assert_close(actual.float(), expected.float(), **BF16)
        if training:
            grads = []
            for out in (expected, actual):
                model.zero_grad(set_to_none=True)
                out.float().square().mean().backward()
                grads.append([p.grad.clone() for p in model.parameters()])
            for mine, theirs in zip(grads[1], grads[0]):
                torch.testing.assert_close(mine, theirs, **BF16)
        if k == 1:
            kernels = surge.counters["kernels"]
    assert surge.counters["static_fallbacks"] == 0 and surge.counters["fallbacks"] == 0
    assert surge.counters["graphs"] == 2 and surge.counters["recompiles"] == 1   # static, then dynamic
    assert surge.counters["kernels"] == kernels, "a later length compiled kernels again"


def test_transformers_bert_runs_eagers_attention_op():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=1024, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=1024, max_position_embeddings=L + 2,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.BertModel(config).cuda().to(torch.bfloat16).eval()
    ids = torch.randint(0, 1024, (B, L), device="cuda")

    def run(m):
        return m(input_ids=ids).last_hidden_state

    compiled = surge.compile(model, backend="triton")
    with torch.no_grad():
        run(compiled)
        want, got = AttentionOps(), AttentionOps()
        with want:
            expected = run(model)
        with got:
            actual = run(compiled)
    assert surge.counters["fallbacks"] == 0
    assert got.ops == want.ops and "_scaled_dot_product_attention_math" not in got.ops, (got.ops, want.ops)
    torch.testing.assert_close(actual, expected, **BF16)
