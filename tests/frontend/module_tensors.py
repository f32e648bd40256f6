"""A module holding tensors at module level, imported inside compiled functions by the tests."""
import torch

TABLE = torch.arange(4.0)
SCALE = 3
