"""Which options the key of stored captures follows (frontend/disk_cache.py's code_key)."""
import pytest

from surge.frontend.disk_cache import code_key
from surge.options import CompileConfig, Options, code_fields


def captured(x):
    return x + 1


def test_settings_that_change_no_capture_keep_the_key():
    code, base = captured.__code__, Options()
    key = code_key(code, base)
    assert key is not None
    for same in (base.replace(progress=False), base.replace(compile_workers=3), base.replace(cache_dir="/x")):
        assert code_key(code, same) == key
    assert code_key(code, base.replace(fallback_random=True)) != key


def _changed(value):
    if value is None or isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    return f"{value}/other"


@pytest.mark.parametrize("name", code_fields())
def test_each_option_that_changes_compiled_code_changes_the_key(name):
    code, base = captured.__code__, Options()
    assert code_key(code, base.replace(**{name: _changed(getattr(base, name))})) != code_key(code, base)


def test_the_key_follows_the_configs_cache_key(monkeypatch):
    """A config field that changes generated code without being an option of its own still
    changes the key: the options enter through ``CompileConfig.cache_key()``."""
    code, base = captured.__code__, Options()
    key = code_key(code, base)
    monkeypatch.setattr(CompileConfig, "cache_key", lambda self, target=None: "another generator")
    assert code_key(code, base) != key
