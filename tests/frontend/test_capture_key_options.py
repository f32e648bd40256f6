"""Which options the key of stored captures follows (frontend/disk_cache.py's code_key)."""
from surge.frontend.disk_cache import code_key
from surge.options import Options


def captured(x):
    return x + 1


def test_settings_that_change_no_capture_keep_the_key():
    code, base = captured.__code__, Options()
    key = code_key(code, base)
    assert key is not None
    for same in (base.replace(progress=False), base.replace(compile_workers=3), base.replace(cache_dir="/x")):
        assert code_key(code, same) == key
    assert code_key(code, base.replace(fallback_random=True)) != key
