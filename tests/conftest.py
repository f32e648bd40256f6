"""Every test starts with empty compile caches, zeroed counters and torch's global
state as a fresh process has it (grad mode on, float32 default dtype), so one
test that fails midway cannot change what the next one sees."""
import os

import pytest
import torch

# Without a GPU, generated Triton kernels run in Triton's CPU interpreter. Triton
# fixes interpreted-or-compiled when it is first imported, and collecting some
# test modules imports it (torch's OpInfo database does), so the switch is set
# here, before anything else is collected.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Captures stored on disk would let one test (or an earlier run) serve another's
# first call and change what it counts; the frontend disk cache's own tests turn
# it on with a folder of their own.
os.environ.setdefault("SURGE_FRONTEND_CACHE", "0")

import surge  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_surge_state():
    surge.reset()
    surge.counters.reset()
    yield
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
