"""Fixtures of the capture corpus: every test starts from empty caches and zero counters."""
import pytest
import torch

import surge


@pytest.fixture(autouse=True)
def fresh_surge_state():
    # Module-level programs are shared by several tests; a cache entry left by one
    # test must not serve (or count as a recompile in) the next.
    surge.reset()
    surge.counters.reset()
    default_dtype = torch.get_default_dtype()
    grad_enabled = torch.is_grad_enabled()
    yield
    torch.set_default_dtype(default_dtype)
    torch.set_grad_enabled(grad_enabled)

