"""HuggingFace transformers models through surge's capture frontend.

Small random-weight GPT-2, Llama, BERT and T5 models built offline from configs:
forward in eval and train mode (dropout probabilities 0) and parameter gradients
must match eager, with no more graphs than torch.compile makes for the same
model (full capture: one graph each).
"""
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import surge  # noqa: E402

VOCAB, SEQ, BATCH = 128, 8, 2


def _gpt2():
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def _llama():
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    return transformers.LlamaForCausalLM(config)


def _bert():
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertModel(config)


def _t5():
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
        dropout_rate=0.0, decoder_start_token_id=0)
    return transformers.T5ForConditionalGeneration(config)


MODELS = {"gpt2": (_gpt2, "logits"), "llama": (_llama, "logits"),
          "bert": (_bert, "last_hidden_state"), "t5": (_t5, "logits")}


def _inputs(name):
    kwargs = {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQ)), "use_cache": False}
    if name == "t5":
        kwargs["decoder_input_ids"] = torch.randint(0, VOCAB, (BATCH, SEQ))
    if name == "bert":
        kwargs["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long)
    return kwargs


def _loss(output):
    """Every tensor output takes part, so every parameter gets a gradient."""
    return sum(t.float().pow(2).mean() for t in output.to_tuple() if isinstance(t, torch.Tensor))


def _torch_compile_graphs(model, kwargs) -> int:
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(model, backend=counting)(**kwargs)
    finally:
        torch._dynamo.reset()
    return len(graphs)


@pytest.fixture(autouse=True)
def _fresh():
    surge.reset()
    with torch.random.fork_rng():  # the RNG stream of later test files is left as it was
        yield
    surge.reset()


@pytest.mark.parametrize("name", list(MODELS))
def test_eval_forward_is_one_graph(name):
    build, key = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    compiled = surge.compile(model, backend="eager")
    before = dict(surge.counters)
    for _ in range(2):  # the second call is a cache hit on fresh inputs
        kwargs = _inputs(name)
        out = compiled(**kwargs)
        ref = model(**kwargs)
        assert type(out) is type(ref) and list(out.keys()) == list(ref.keys())
        torch.testing.assert_close(out[key], ref[key])
        torch.testing.assert_close(out.to_tuple()[0], ref.to_tuple()[0])
    assert surge.counters["graphs"] - before.get("graphs", 0) == 1
    assert surge.counters["graph_breaks"] == before.get("graph_breaks", 0)
    assert surge.counters["fallbacks"] == before.get("fallbacks", 0)
    assert surge.counters["cache_hits"] - before.get("cache_hits", 0) == 1
    assert 1 <= _torch_compile_graphs(model, _inputs(name))  # surge makes no more graphs than it


@pytest.mark.parametrize("name,backend", [(name, "aot_eager") for name in MODELS] + [("llama", None)])
def test_train_forward_backward_matches_eager(name, backend):
    build, key = MODELS[name]
    torch.manual_seed(0)
    model = build().train()
    kwargs = _inputs(name)
    before = surge.counters["graphs"]
    loss = _loss(surge.compile(model, backend=backend)(**kwargs))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    ref = _loss(model(**kwargs))
    ref.backward()
    torch.testing.assert_close(loss, ref)
    assert grads.keys() == {n for n, p in model.named_parameters() if p.grad is not None}
    for n, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(grads[n], p.grad, msg=n)
    assert surge.counters["graphs"] - before == 1
    assert surge.counters["fallbacks"] == 0


def test_config_change_recompiles():
    """A config flag the trace read is guarded: flipping it must not reuse the graph."""
    torch.manual_seed(0)
    model = _gpt2().eval()
    compiled = surge.compile(model, backend="eager")
    kwargs = _inputs("gpt2")
    compiled(**kwargs)
    model.config.output_hidden_states = True
    try:
        out, ref = compiled(**kwargs), model(**kwargs)
        assert len(out.hidden_states) == len(ref.hidden_states) == 3
        for a, b in zip(out.hidden_states, ref.hidden_states):
            torch.testing.assert_close(a, b)
    finally:
        model.config.output_hidden_states = False
    assert surge.counters["recompiles"] >= 1
    torch.testing.assert_close(compiled(**kwargs).logits, model(**kwargs).logits)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_kv_cache_made_and_consumed_in_compiled_code(name):
    """use_cache: the DynamicCache built inside the graph is returned as eager builds it,
    and a decoding step that reads and extends an input cache matches eager."""
    torch.manual_seed(0)
    model = MODELS[name][0]().eval()
    compiled = surge.compile(model, backend="eager")
    kwargs = _inputs(name)
    del kwargs["use_cache"]
    out, ref = compiled(**kwargs), model(**kwargs)
    assert surge.counters["graphs"] == 1 and surge.counters["graph_breaks"] == 0
    cache, ref_cache = out.past_key_values, ref.past_key_values
    assert type(cache) is type(ref_cache) and cache.get_seq_length() == ref_cache.get_seq_length() == SEQ
    for layer, ref_layer in zip(cache.layers, ref_cache.layers, strict=True):
        torch.testing.assert_close(layer.keys, ref_layer.keys)
        torch.testing.assert_close(layer.values, ref_layer.values)
    step = torch.randint(0, VOCAB, (BATCH, 1))
    torch.testing.assert_close(compiled(input_ids=step, past_key_values=cache).logits,
                               model(input_ids=step, past_key_values=ref_cache).logits)
    assert cache.get_seq_length() == ref_cache.get_seq_length() == SEQ + 1
    assert surge.counters["fallbacks"] == 0 and surge.counters["graph_breaks"] == 0


def test_t5_with_its_encoder_decoder_cache_is_one_graph():
    """use_cache on T5 deep-copies the config (get_text_config) to build its caches."""
    torch.manual_seed(0)
    model = _t5().eval()
    compiled = surge.compile(model, backend="eager")
    for _ in range(2):
        kwargs = _inputs("t5")
        del kwargs["use_cache"]
        out, ref = compiled(**kwargs), model(**kwargs)
        torch.testing.assert_close(out.logits, ref.logits)
        assert type(out.past_key_values) is type(ref.past_key_values)
        assert out.past_key_values.get_seq_length() == ref.past_key_values.get_seq_length() == SEQ
    assert surge.counters["graphs"] == 1 and surge.counters["cache_hits"] == 1
    assert surge.counters["graph_breaks"] == 0 and surge.counters["fallbacks"] == 0


# ---- heads that build their loss module in forward (``CrossEntropyLoss()``) -------------

def _bert_classifier():
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, num_labels=3,
        problem_type="single_label_classification")
    return transformers.BertForSequenceClassification(config)


def _vit_classifier():
    config = transformers.ViTConfig(
        image_size=16, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, num_labels=3, problem_type="single_label_classification")
    return transformers.ViTForImageClassification(config)


LOSS_HEADS = {
    "t5": (_t5, lambda: {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQ)),
                         "labels": torch.randint(0, VOCAB, (BATCH, SEQ)), "use_cache": False}),
    "bert_classifier": (_bert_classifier, lambda: {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQ)),
                                                   "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long),
                                                   "labels": torch.randint(0, 3, (BATCH,))}),
    "vit_classifier": (_vit_classifier, lambda: {"pixel_values": torch.randn(BATCH, 3, 16, 16),
                                                 "labels": torch.randint(0, 3, (BATCH,))}),
}


@pytest.mark.parametrize("name", list(LOSS_HEADS))
def test_loss_built_in_forward_is_one_graph_without_recompiles(name):
    """The head makes ``CrossEntropyLoss()`` on every call: captured in the graph, not a
    break whose resume function would guard on that fresh module (a recompile per call)."""
    build, make_inputs = LOSS_HEADS[name]
    torch.manual_seed(0)
    model = build().eval()
    compiled = surge.compile(model, backend="eager")
    before = dict(surge.counters)
    for _ in range(3):
        kwargs = make_inputs()
        out, ref = compiled(**kwargs), model(**kwargs)
        torch.testing.assert_close(out.loss, ref.loss)
        torch.testing.assert_close(out.logits, ref.logits)
    for counter in ("graph_breaks", "recompiles", "fallbacks"):
        assert surge.counters[counter] == before.get(counter, 0), counter
    assert surge.counters["graphs"] - before.get("graphs", 0) == 1
    assert _torch_compile_graphs(model, make_inputs()) == 1


def test_first_call_that_assigns_the_config_makes_the_graphs_torch_compile_makes():
    """The head sets ``config.problem_type`` on its first call; huggingface_hub validates
    that assignment (a table of validators keyed by typing objects, ``__slots__`` of
    dataclass fields): captured, then the changed config recompiles once."""
    def build():
        torch.manual_seed(0)
        config = transformers.BertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=32, num_labels=3)
        return transformers.BertForSequenceClassification(config).eval()

    model, make_inputs = build(), LOSS_HEADS["bert_classifier"][1]
    compiled = surge.compile(model, backend="eager")
    for _ in range(3):
        kwargs = make_inputs()
        torch.testing.assert_close(compiled(**kwargs).loss, model(**kwargs).loss)
    assert model.config.problem_type == "single_label_classification"
    assert surge.counters["graph_breaks"] == 0 and surge.counters["fallbacks"] == 0
    assert surge.counters["graphs"] == 2 and surge.counters["recompiles"] == 1

    graphs = []
    peer = build()

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        compiled_peer = torch.compile(peer, backend=counting)
        for _ in range(3):
            compiled_peer(**make_inputs())
    finally:
        torch._dynamo.reset()
    assert len(graphs) == surge.counters["graphs"]
