"""Models bundled with surge (random weights, no downloads) for the demo and bench."""
from .gpt import GPT, GPTConfig, gpt2_small_config, small_config
from .llama import Llama, LlamaConfig, small_llama_config

__all__ = [
    "GPT", "GPTConfig", "gpt2_small_config", "small_config",
    "Llama", "LlamaConfig", "small_llama_config",
]
