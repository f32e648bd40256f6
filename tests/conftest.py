"""Every test starts with empty compile caches, zeroed counters and torch's global
state as a fresh process has it (grad mode on, float32 default dtype), so one
test that fails midway cannot change what the next one sees."""
import pytest
import torch

import surge


@pytest.fixture(autouse=True)
def _fresh_surge_state():
    surge.reset()
    surge.counters.reset()
    yield
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
