import dataclasses

import torch

from surge.models import GPT, Llama, gpt2_small_config, small_config, small_llama_config


def test_gpt2_small_config_has_gpt2_small_parameter_count():
    with torch.device("meta"):
        model = GPT(gpt2_small_config())
    # GPT-2 small: 124,439,808 parameters with the LM head tied to the token embedding.
    assert sum(p.numel() for p in model.parameters()) == 124_439_808


def test_gpt_sdpa_and_explicit_attention_agree_and_are_causal():
    config = small_config()
    torch.manual_seed(0)
    explicit = GPT(config).eval()
    sdpa = GPT(dataclasses.replace(config, use_sdpa=True)).eval()
    sdpa.load_state_dict(explicit.state_dict())
    idx = torch.randint(0, config.vocab_size, (2, 24))
    with torch.no_grad():
        a, b = explicit(idx), sdpa(idx)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        changed = idx.clone()
        changed[:, 20:] = (changed[:, 20:] + 1) % config.vocab_size
        c = explicit(changed)
    assert a.shape == (2, 24, config.vocab_size)
    torch.testing.assert_close(c[:, :20], a[:, :20])  # the future does not leak backwards
    assert not torch.allclose(c[:, 20:], a[:, 20:])


def test_llama_is_causal_and_trains():
    config = small_llama_config()
    torch.manual_seed(0)
    model = Llama(config)
    idx = torch.randint(0, config.vocab_size, (2, 16))
    out = model(idx)
    changed = idx.clone()
    changed[:, 10] = (changed[:, 10] + 1) % config.vocab_size
    torch.testing.assert_close(model(changed)[:, :10], out[:, :10])
    out.float().square().mean().backward()
    assert all(p.grad is not None for p in model.parameters())
