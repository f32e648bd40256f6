"""Backend tests run Triton kernels in its CPU interpreter when there is no GPU.

Triton fixes interpreted-or-compiled when it is first imported, so the switch
is set here, at collection, before any test imports it.
"""
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Compiled modules and autotuning results go to a fresh folder per test session."""
    old = os.environ.get("SURGE_CACHE_DIR")
    os.environ["SURGE_CACHE_DIR"] = str(tmp_path_factory.mktemp("surge_cache"))
    yield
    if old is None:
        os.environ.pop("SURGE_CACHE_DIR", None)
    else:
        os.environ["SURGE_CACHE_DIR"] = old
