"""The disk-cache store (surge/cache_store.py) on its own: what it records at write,
what it refuses at read, and where it writes when the cache folder cannot be written."""
import os
import stat

import surge
from surge import cache_store


def _store(tmp_path, kind="things"):
    return cache_store.store(str(tmp_path / "cache"), kind)


def test_data_round_trips_and_a_changed_byte_anywhere_is_refused(tmp_path):
    store = _store(tmp_path)
    path = store.write_bytes("a.bin", b"payload \x00\xff" * 10)
    assert store.read_bytes("a.bin") == b"payload \x00\xff" * 10
    whole = open(path, "rb").read()
    assert whole.startswith(cache_store.HEADER_MAGIC)
    surge.counters.reset()
    for at in (0, len(whole) // 3, len(whole) - 1):   # header, payload, last byte
        damaged = bytearray(whole)
        damaged[at] ^= 1
        open(path, "wb").write(bytes(damaged))
        assert store.read_bytes("a.bin") is None, at
    open(path, "wb").write(whole + b"more")   # longer than recorded
    assert store.read_bytes("a.bin") is None
    assert surge.counters["disk_cache_rejected"] == 4
    assert store.read_bytes("missing.bin") is None and surge.counters["disk_cache_rejected"] == 4


def test_a_raw_file_needs_its_record(tmp_path):
    store = _store(tmp_path)
    path = store.write_file("m.py", b"X = 1\n")
    assert store.read_file("m.py") == (path, b"X = 1\n")
    assert open(path, "rb").read() == b"X = 1\n"   # the file itself is as written (importers read it)
    os.unlink(path + cache_store.SIDECAR_SUFFIX)
    assert store.read_file("m.py") is None
    assert sorted(os.listdir(store.folder)) == ["m.py"]   # no temporary files left behind


def test_a_symlink_is_not_followed(tmp_path):
    store = _store(tmp_path)
    elsewhere = store.write_file("real.py", b"Y = 2\n")
    os.symlink(elsewhere, os.path.join(store.folder, "link.py"))
    os.symlink(elsewhere + cache_store.SIDECAR_SUFFIX, os.path.join(store.folder, "link.py.sum"))
    assert store.read_file("link.py") is None


def test_a_folder_is_whole_or_nothing_and_a_damaged_one_is_replaced(tmp_path):
    store = _store(tmp_path)
    files = {"k.bin": b"\x7fELF" + bytes(100), "k.json": b"{}"}
    store.write_folder("rec", files)
    assert {n: d for n, (_, d) in store.read_folder("rec").items()} == files
    with open(os.path.join(store.folder, "rec", "k.bin"), "r+b") as f:
        f.truncate(10)
    assert store.read_folder("rec") is None
    store.write_folder("rec", files)
    assert {n: d for n, (_, d) in store.read_folder("rec").items()} == files
    assert [n for n in os.listdir(store.folder) if n.endswith(cache_store.TEMP_SUFFIX)] == []
    assert stat.S_IMODE(os.stat(os.path.join(store.folder, "rec")).st_mode) == 0o700


def test_a_write_that_fails_goes_to_the_private_folder(tmp_path):
    store = _store(tmp_path)
    store.write_bytes("a.bin", b"1")
    os.unlink(os.path.join(store.folder, "a.bin"))
    os.rmdir(store.folder)
    open(store.folder, "w").close()   # the folder is now a file: writes there fail
    path = store.write_bytes("b.bin", b"2")
    assert path.startswith(cache_store.private_root() + os.sep) and store.read_bytes("b.bin") == b"2"
