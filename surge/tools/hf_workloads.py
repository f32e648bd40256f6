"""GPT-2 and Llama from ``transformers`` configs with random weights (no downloads).

Registered only when ``transformers`` is installed. Dropout is off so that a
training step is deterministic and comparable with eager.
"""
from __future__ import annotations

import importlib.util
import os

import torch
import torch.nn as nn

from .workloads import Instance, next_token_loss, pick, token_maker, workload

AVAILABLE = importlib.util.find_spec("transformers") is not None


class Logits(nn.Module):
    """Calls a causal LM on token ids and returns its logits tensor."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def _import_transformers():
    # Never reach for the network: every model here is built from a config.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers

    return transformers


def _sizes(device, scale):
    # batch, seq, layers, width, heads, vocab
    return pick(
        device, scale, gpu=(8, 1024, 12, 768, 12, 50257), cpu=(2, 128, 2, 256, 4, 8192),
        quick=(2, 16, 2, 64, 4, 512), tiny=(1, 4, 1, 16, 2, 128),
    )


def _gpt2(device, scale, training):
    transformers = _import_transformers()
    batch, seq, layers, width, heads, vocab = _sizes(device, scale)
    config = transformers.GPT2Config(
        vocab_size=vocab, n_positions=max(seq, 16), n_embd=width, n_layer=layers, n_head=heads,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )
    return _instance(transformers.GPT2LMHeadModel, config, device, training, batch, seq, vocab,
                     {"layers": layers, "width": width, "heads": heads})


def _llama(device, scale, training):
    transformers = _import_transformers()
    batch, seq, layers, width, heads, vocab = _sizes(device, scale)
    width = {768: 2048}.get(width, width)  # Llama's own shape family on CUDA
    heads = {12: 16}.get(heads, heads)
    config = transformers.LlamaConfig(
        # SwiGLU's 8/3 expansion, rounded up to a multiple of 64 as Llama does for fast matmuls.
        vocab_size=32000 if vocab == 50257 else vocab, hidden_size=width,
        intermediate_size=(width * 8 // 3 + 63) // 64 * 64,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=max(seq, 16),
    )
    return _instance(transformers.LlamaForCausalLM, config, device, training, batch, seq, config.vocab_size,
                     {"layers": layers, "width": width, "heads": heads})


def _instance(model_class, config, device, training, batch, seq, vocab, shape_sizes):
    dtype = torch.bfloat16 if device.startswith("cuda") and not training else torch.float32
    torch.manual_seed(0)
    model = model_class(config).to(device=device, dtype=dtype)
    model.train(training)
    return Instance(
        Logits(model), token_maker(device, vocab, batch, seq), dtype=dtype, training=training,
        sizes={"batch": batch, "seq": seq, "vocab": vocab, **shape_sizes},
        loss_fn=next_token_loss if training else None,
    )


if AVAILABLE:
    @workload("hf_gpt2_infer", "transformers GPT-2 from a config, random weights, inference")
    def hf_gpt2_infer(device, scale):
        return _gpt2(device, scale, training=False)

    @workload("hf_gpt2_train", "transformers GPT-2 from a config, one training step")
    def hf_gpt2_train(device, scale):
        return _gpt2(device, scale, training=True)

    @workload("hf_llama_infer", "transformers Llama from a config, random weights, inference")
    def hf_llama_infer(device, scale):
        return _llama(device, scale, training=False)

    @workload("hf_llama_train", "transformers Llama from a config, one training step")
    def hf_llama_train(device, scale):
        return _llama(device, scale, training=True)
