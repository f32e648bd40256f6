"""Every test starts with empty compile caches and zeroed counters."""
import pytest

import surge


@pytest.fixture(autouse=True)
def _fresh_surge_state():
    surge.reset()
    surge.counters.reset()
    yield
