"""cpp backend tests build into a fresh disk cache per test run."""
import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    old = os.environ.get("SURGE_CACHE_DIR")
    os.environ["SURGE_CACHE_DIR"] = str(tmp_path_factory.mktemp("surge_cpp_cache"))
    yield
    if old is None:
        os.environ.pop("SURGE_CACHE_DIR", None)
    else:
        os.environ["SURGE_CACHE_DIR"] = old
