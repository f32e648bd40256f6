"""Constant attention masks (aot/attention_masks.py): the causal pattern becomes
is_causal=True, a mask hiding nothing is dropped.

Each case is compiled twice: once through a probe backend that runs the pass on the
captured graph and reports what it did to the attention call, and once through surge's
default backend (forward, and for training the gradients), which must equal eager.
"""
import pytest
import torch
import torch.nn.functional as F

import surge
from surge.aot.attention_masks import MaskPattern, constant_mask_calls, simplify_attention_masks

B, H, L, D = 2, 3, 8, 16


def _attention_call(gm):
    return next(n for n in gm.graph.nodes if n.op == "call_function" and n.target is F.scaled_dot_product_attention)


def _mask(gm):
    call = _attention_call(gm)
    return call.kwargs.get("attn_mask", call.args[3] if len(call.args) > 3 else None)


def _is_causal(gm) -> bool:
    call = _attention_call(gm)
    return call.kwargs.get("is_causal", call.args[5] if len(call.args) > 5 else False)


def rewrite_of(fn, *inputs) -> MaskPattern | None:
    """What the pass made of ``fn``'s attention call: the pattern it found, or None (left as is)."""
    seen = []

    def probe(gm, example_inputs):
        before = gm.code
        found = [pattern for _, pattern in constant_mask_calls(gm)]
        result = simplify_attention_masks(gm)
        assert gm.code == before and _mask(gm) is not None, "the caller's graph is left as it was"
        assert (result is not gm) == bool(found)
        if found:
            assert _mask(result) is None and _is_causal(result) == (found[0] is MaskPattern.CAUSAL)
        seen.append(found[0] if found else None)
        return gm

    surge.compile(fn, backend=probe, fullgraph=True)(*inputs)
    return seen[0]


def check_matches_eager(fn, *inputs, training=False):
    inputs = [t.detach().requires_grad_(training) for t in inputs]
    expected = fn(*inputs)
    actual = surge.compile(fn, fullgraph=True)(*[t.detach().requires_grad_(training) for t in inputs])
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    if training:
        ours = [t.detach().requires_grad_(True) for t in inputs]
        surge.compile(fn, fullgraph=True)(*ours).square().sum().backward()
        expected.square().sum().backward()
        for mine, theirs in zip(ours, inputs):
            torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5)


def qkv(q_len=L, kv_len=L):
    return (torch.randn(B, H, q_len, D), torch.randn(B, H, kv_len, D), torch.randn(B, H, kv_len, D))


def arange_mask(q, k):
    """transformers' way: index functions over aranges, expanded over the batch."""
    q_idx = torch.arange(q.shape[-2], device=q.device)[None, None, :, None]
    kv_idx = torch.arange(k.shape[-2], device=q.device)[None, None, None, :]
    return (kv_idx <= q_idx).expand(q.shape[0], -1, -1, -1)


def bool_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=arange_mask(q, k))


def float_causal(q, k, v):
    mask = torch.zeros(q.shape[-2], k.shape[-2]).masked_fill(~arange_mask(q, k)[0, 0], float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, mask)


@pytest.mark.parametrize("fn", [bool_causal, float_causal])
@pytest.mark.parametrize("training", [False, True])
def test_causal_masks_become_is_causal(fn, training):
    assert rewrite_of(fn, *qkv()) is MaskPattern.CAUSAL
    check_matches_eager(fn, *qkv(), training=training)


def test_more_keys_than_queries_keeps_the_upper_left_pattern():
    # is_causal with q_len < kv_len means tril(ones(q, kv)): query i sees keys 0..i
    inputs = qkv(q_len=4, kv_len=8)
    assert rewrite_of(bool_causal, *inputs) is MaskPattern.CAUSAL
    check_matches_eager(bool_causal, *qkv(q_len=4, kv_len=8))


def shifted_window(q, k, v):   # a query sees itself and the keys after it: not causal
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~arange_mask(q, k) | torch.eye(L, dtype=torch.bool))


def input_dependent(q, k, v):   # a mask computed from an input's values: unknown when compiling
    return F.scaled_dot_product_attention(q, k, v, attn_mask=arange_mask(q, k) & (q[..., :1] > -10))


def finite_float_mask(q, k, v):   # finfo.min is not -inf: a fully masked row would differ
    mask = torch.zeros(L, L).masked_fill(~arange_mask(q, k)[0, 0], torch.finfo(torch.float32).min)
    return F.scaled_dot_product_attention(q, k, v, mask)


def updated_in_place(q, k, v):   # the mask's arange is written into after the mask is built
    idx = torch.arange(L)
    mask = idx[None, :] <= idx[:, None]
    idx.add_(1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) + idx.sum()


@pytest.mark.parametrize("fn", [shifted_window, input_dependent, finite_float_mask])
def test_other_masks_stay(fn):
    assert rewrite_of(fn, *qkv()) is None
    check_matches_eager(fn, *qkv())


def bidirectional_mask(q, k):
    """transformers' mask for an encoder with no padding, built while compiling: ``q_idx >= 0``
    over one column, expanded (its last dimension has stride 0)."""
    q_idx = torch.arange(q.shape[-2], device=q.device)[None, None, :, None]
    return (q_idx >= 0).expand(q.shape[0], -1, q.shape[-2], k.shape[-2])


def bool_nothing_hidden(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bidirectional_mask(q, k))


def float_nothing_hidden(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, torch.zeros(B, 1, 1, k.shape[-2]))


@pytest.mark.parametrize("fn", [bool_nothing_hidden, float_nothing_hidden])
@pytest.mark.parametrize("training", [False, True])
def test_masks_hiding_nothing_are_dropped(fn, training):
    assert bidirectional_mask(*qkv()[:2]).stride()[-1] == 0
    assert rewrite_of(fn, *qkv()) is MaskPattern.NOTHING_HIDDEN
    check_matches_eager(fn, *qkv(), training=training)


def constant_padding(q, k, v):   # the last two keys are padding: hidden from every query
    keep = torch.arange(k.shape[-2]) < k.shape[-2] - 2
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep.expand(q.shape[0], 1, q.shape[-2], -1))


def test_a_mask_hiding_some_keys_stays():
    assert rewrite_of(constant_padding, *qkv()) is None
    check_matches_eager(constant_padding, *qkv())


def test_a_mask_written_in_place_is_not_evaluated_ahead():
    seen = []

    def probe(gm, example_inputs):
        seen.append(simplify_attention_masks(gm) is not gm)
        return gm

    surge.compile(updated_in_place, backend=probe)(*qkv())
    assert seen and not any(seen)
    check_matches_eager(updated_in_place, *qkv())


def test_transformers_gpt2_gets_is_causal():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 64, (2, 8))
    counts = []

    def probe(gm, example_inputs):
        counts.append(sum(p is MaskPattern.CAUSAL for _, p in constant_mask_calls(gm)))
        return gm

    # without a cache (training, or use_cache=False) transformers checks position ids for
    # packed sequences, and under compilation builds the mask instead of reading them
    with torch.no_grad():
        surge.compile(model, backend=probe)(input_ids=ids, use_cache=False)
        assert sum(counts) == 2   # one attention call per layer
        expected = model(input_ids=ids, use_cache=False).logits
        actual = surge.compile(model)(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)


def test_the_rewrite_is_a_named_step_on_a_copy_of_the_frontends_graph(tmp_path, monkeypatch):
    """aot's torch-level pipeline rewrites a copy: the graph the frontend captured (and
    keeps in its disk record) still has its mask, the debug dir shows the step's result."""
    from surge.aot.backend import aot_eager_backend
    from surge.aot.pipelines import TORCH_GRAPH
    from surge.observe.debug_dir import read_artifacts

    assert TORCH_GRAPH.step_names == ["attention_masks"]
    kept = []

    def backend(gm, example_inputs, **kwargs):
        kept.append(gm)
        return aot_eager_backend(gm, example_inputs, **kwargs)

    inputs = qkv()
    monkeypatch.setenv("SURGE_DEBUG_DIR", str(tmp_path))   # a user backend reads the environment's options
    compiled = surge.compile(bool_causal, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(*inputs), bool_causal(*inputs), rtol=1e-5, atol=1e-5)
    assert _mask(kept[0]) is not None and _attention_call(kept[0]).kwargs.get("is_causal", False) is False
    (files,) = read_artifacts(str(tmp_path)).values()
    step = files["torch.01_attention_masks.py"]
    assert "is_causal = True" in step and "attn_mask = None" in step
    assert "is_causal" not in files["graph.py"]
