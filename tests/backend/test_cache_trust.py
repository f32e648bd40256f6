"""Who may have written what surge loads from its cache: folders and files it makes are
private (0700 / 0600); a cache root that another user could write to, or that cannot be
written at all, gives one warning and a private cache for the process, whose compiles
still happen and return eager's results. Tests run as root, which passes every
permission check: an unwritable root is one below a regular file, and a foreign
owner is made with chown."""
import logging
import os
import stat

import pytest
import torch
import torch.nn.functional as F

import surge
from surge import cache_store


def _fn(x):
    return F.gelu(x) * 2 - x.amax(-1, keepdim=True)


def _compile_and_check(root, backend="cpp", frontend_cache=True):
    x = torch.randn(4, 6)
    compiled = surge.compile(_fn, backend=backend, options={"cache_dir": str(root), "frontend_cache": frontend_cache})
    torch.testing.assert_close(compiled(x), _fn(x))
    assert surge.counters["graphs"] == 1 and surge.counters["fallbacks"] == 0 and surge.counters["kernels"] > 0


def _cache_warnings(caplog) -> list:
    return [r.getMessage() for r in caplog.records if r.name == "surge" and "cache folder" in r.getMessage()]


def _walk(root):
    for folder, folders, files in os.walk(root):
        yield folder, True
        for name in files:
            yield os.path.join(folder, name), False


def test_new_folders_are_0700_and_files_0600(tmp_path):
    root = tmp_path / "made" / "by" / "surge"   # parents surge creates are private too
    _compile_and_check(root)
    seen = {stat.S_IMODE(os.stat(p).st_mode): is_folder for p, is_folder in _walk(tmp_path / "made")}
    assert seen == {0o700: True, 0o600: False}
    kinds = {p.name for p in root.iterdir()}
    assert {"frontend", "graph_cache", "cpp_graphs", "cpp"} <= kinds
    assert not any(p.name == "__pycache__" for p in root.rglob("*"))   # modules run from checked text


@pytest.mark.parametrize("writable_by", [0o020, 0o002])
def test_a_root_others_can_write_is_not_loaded_from(writable_by, tmp_path, caplog):
    root = tmp_path / "shared"
    _compile_and_check(root)   # a good cache...
    os.chmod(root, 0o700 | writable_by)   # ...that another user could have changed since
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    surge.reset()
    surge.counters.reset()
    caplog.set_level(logging.WARNING, logger="surge")
    _compile_and_check(root)
    (warning,) = _cache_warnings(caplog)
    assert str(root) in warning and "writable by" in warning and "does not load from it" in warning
    assert surge.counters["graph_cache_hits"] == 0 and surge.counters["frontend_disk_hits"] == 0
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before   # nothing written there either


def test_a_kind_folder_others_can_write_is_not_loaded_from(tmp_path, caplog):
    root = tmp_path / "cache"
    _compile_and_check(root, frontend_cache=False)
    os.chmod(root / "graph_cache", 0o777)
    surge.reset()
    surge.counters.reset()
    caplog.set_level(logging.WARNING, logger="surge")
    _compile_and_check(root, frontend_cache=False)
    (warning,) = _cache_warnings(caplog)
    assert str(root / "graph_cache") in warning and "writable by group (mode 777)" in warning
    assert surge.counters["graph_cache_hits"] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_file_of_another_user_is_not_loaded(tmp_path, caplog):
    root = tmp_path / "cache"
    _compile_and_check(root, frontend_cache=False)
    (entry,) = (root / "graph_cache").iterdir()
    os.chown(entry, 12345, -1)
    surge.reset()
    surge.counters.reset()
    caplog.set_level(logging.WARNING, logger="surge")
    _compile_and_check(root, frontend_cache=False)
    assert surge.counters["graph_cache_hits"] == 0
    assert any(str(entry) in w and "owned by uid 12345" in w for w in
               [r.getMessage() for r in caplog.records if r.name == "surge"])


def test_an_uncreatable_root_warns_once_and_compiles_privately(tmp_path, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    root = blocker / "cache"
    caplog.set_level(logging.WARNING, logger="surge")
    _compile_and_check(root, frontend_cache=False)   # (the private cache is the process's: other tests fill it)
    surge.reset()
    surge.counters.reset()
    _compile_and_check(root, backend="triton", frontend_cache=False)
    (warning,) = _cache_warnings(caplog)
    assert str(root) in warning and f"cannot be created ({blocker} is not a folder)" in warning
    assert "private folder" in warning
    private = cache_store.private_root()
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700 and os.listdir(os.path.join(private, "cpp"))


def test_a_read_only_root_is_read_and_new_entries_go_private(tmp_path, caplog, monkeypatch):
    """A read-only copy of a cache (owned by the user, not writable by others) still serves hits."""
    root = tmp_path / "copy"
    _compile_and_check(root)
    real_writable = cache_store._writable
    monkeypatch.setattr(cache_store, "_writable", lambda folder: False if str(root) in folder
                        else real_writable(folder))   # root ignores the mode bits a user would set
    monkeypatch.setattr(cache_store, "_STORES", {})   # as a new process: stores resolve again
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    surge.reset()
    surge.counters.reset()
    caplog.set_level(logging.WARNING, logger="surge")
    x = torch.randn(4, 6)
    options = {"cache_dir": str(root), "frontend_cache": True}
    torch.testing.assert_close(surge.compile(_fn, backend="cpp", options=options)(x), _fn(x))
    assert surge.counters["frontend_disk_hits"] == 1 and surge.counters["graph_cache_hits"] == 1
    y = torch.randn(5, 7)   # a new shape: a new compile, stored privately
    torch.testing.assert_close(surge.compile(_fn, backend="cpp", options=options)(y), _fn(y))
    assert surge.counters["graph_cache_misses"] == 1 and surge.counters["fallbacks"] == 0
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    warnings = _cache_warnings(caplog)
    assert warnings and all("not writable" in w for w in warnings)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any mode bits")
def test_an_empty_read_only_root_warns_once_and_compiles_privately(tmp_path, caplog):
    root = tmp_path / "read_only"
    root.mkdir(mode=0o500)
    caplog.set_level(logging.WARNING, logger="surge")
    _compile_and_check(root, frontend_cache=False)
    (warning,) = _cache_warnings(caplog)
    assert str(root) in warning and "is not writable" in warning
    assert os.listdir(root) == []
