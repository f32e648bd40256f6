"""A damaged artifact in any disk cache is rebuilt, never loaded and never a crash.

Each kind of artifact (capture, compiled graph, generated module, kernel file, C++
library, kernel binary, tuning choice) is truncated, zeroed and garbled (one byte
flipped: only the hash sees it) in turn; a fresh state then compiles again, gets
eager's results and leaves an intact artifact behind. The library runs in child
processes: a truncated .so that were mapped would kill its process with SIGBUS."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import surge
from surge import cache_store
from surge.runtime import autotune, binary_cache, cpp_build, kernel_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _zero(path):
    path.write_bytes(bytes(path.stat().st_size))


def _garble(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x5A
    path.write_bytes(bytes(data))


DAMAGES = [_truncate, _zero, _garble]


def _fresh_state():
    surge.reset()
    surge.counters.reset()
    kernel_files._MODULES.clear()
    cpp_build._LOADED.clear()
    binary_cache._LOADED.clear()


def _only(folder, pattern):
    (path,) = folder.glob(pattern)
    return path


def _intact_file(path) -> bool:
    found = cache_store.store(str(path.parent.parent), path.parent.name).read_file(path.name)
    return found is not None and found[0] == str(path)


def _intact_blob(path) -> bool:
    return cache_store.store(str(path.parent.parent), path.parent.name).read_bytes(path.name) is not None


def _fn(x):
    return F.silu(x) * 3 + x.sum(-1, keepdim=True)


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_capture_is_captured_again(damage, tmp_path):
    options = {"frontend_cache": True, "cache_dir": str(tmp_path)}
    surge.compile(_fn, backend="eager", options=options)(torch.randn(3, 5))
    record = _only(tmp_path / "frontend", "*.pkl")
    damage(record)
    _fresh_state()
    x = torch.randn(3, 5)
    torch.testing.assert_close(surge.compile(_fn, backend="eager", options=options)(x), _fn(x))
    assert surge.counters["graphs"] == 1 and surge.counters["frontend_disk_hits"] == 0
    assert surge.counters["disk_cache_rejected"] >= 1 and _intact_blob(record)   # read to look, and to add to
    _fresh_state()   # and the rebuilt record serves the next fresh state
    torch.testing.assert_close(surge.compile(_fn, backend="eager", options=options)(x), _fn(x))
    assert surge.counters["frontend_disk_hits"] == 1


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_compiled_graph_is_compiled_again(damage, tmp_path, monkeypatch):
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path))
    surge.compile(_fn, backend="cpp")(torch.randn(3, 5))
    entry = _only(tmp_path / "graph_cache", "*.pkl")
    damage(entry)
    _fresh_state()
    x = torch.randn(3, 5)
    torch.testing.assert_close(surge.compile(_fn, backend="cpp")(x), _fn(x))
    assert surge.counters["graph_cache_misses"] == 1 and surge.counters["fallbacks"] == 0
    assert _intact_blob(entry)


@pytest.mark.parametrize("backend, folder", [("cpp", "cpp_graphs"), ("triton", "graphs")])
@pytest.mark.parametrize("graph_cache", [False, True])
def test_a_damaged_generated_module_is_generated_again(backend, folder, graph_cache, tmp_path, monkeypatch):
    """Read directly (no compiled-graph cache), or named by a compiled-graph entry."""
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path))
    options = {"graph_cache": graph_cache}
    surge.compile(_fn, backend=backend, options=options)(torch.randn(3, 5))
    module = _only(tmp_path / folder, "*.py")
    for damage in DAMAGES:
        damage(module)
        _fresh_state()
        x = torch.randn(3, 5)
        torch.testing.assert_close(surge.compile(_fn, backend=backend, options=options)(x), _fn(x))
        assert surge.counters["fallbacks"] == 0 and surge.counters["kernels"] > 0
        assert surge.counters["graph_cache_hits"] == int(graph_cache)
        assert _intact_file(module), damage.__name__


def test_a_damaged_or_unrecorded_kernel_file_is_written_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path))
    surge.compile(_fn, backend="triton")(torch.randn(3, 5))
    kernels = sorted((tmp_path / "kernels").glob("*.py"))
    assert kernels
    missing_record = lambda path: os.unlink(str(path) + cache_store.SIDECAR_SUFFIX)  # noqa: E731
    for damage in DAMAGES + [missing_record]:
        for path in kernels:
            damage(path)
        _fresh_state()
        x = torch.randn(3, 5)
        torch.testing.assert_close(surge.compile(_fn, backend="triton")(x), _fn(x))
        assert surge.counters["disk_cache_rejected"] == len(kernels), damage
        assert all(_intact_file(path) for path in kernels)


LIBRARY_CHILD = r'''
import json, torch, torch.nn.functional as F
import surge
def fn(x):
    return F.silu(x) * 3 + x.sum(-1, keepdim=True)
x = torch.randn(3, 5)
torch.testing.assert_close(surge.compile(fn, backend="cpp")(x), fn(x))
print(json.dumps({"compiles": surge.counters["cpp_compiles"], "fallbacks": surge.counters["fallbacks"],
                  "graphs": surge.counters["graphs"]}))
'''


def _library_child(cache_dir) -> dict:
    # no compiled-graph cache: its hit would go straight to the library
    env = dict(os.environ, SURGE_CACHE_DIR=str(cache_dir), SURGE_GRAPH_CACHE="0",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", LIBRARY_CHILD], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_damaged_cpp_library_is_built_again_in_a_fresh_process(tmp_path):
    assert _library_child(tmp_path) == {"compiles": 1, "fallbacks": 0, "graphs": 1}
    library = _only(tmp_path / "cpp", "*.so")
    for damage in DAMAGES:
        damage(library)
        assert _library_child(tmp_path) == {"compiles": 1, "fallbacks": 0, "graphs": 1}, damage.__name__
        assert _intact_file(library)   # (that an intact library serves the next process:
    # tests/backend_cpp/test_cache_and_fallback.py)
    assert [p.name for p in (tmp_path / "cpp").iterdir() if p.name.endswith(".tmp")] == []


class _Compiled:
    """What ``binary_cache.store`` reads of Triton's compiled kernel."""

    def __init__(self, folder):
        self.hash = "h"
        self.src = type("Src", (), {"signature": {"x": "*fp32"}, "constants": {}})()
        self.metadata_group = {}
        for name, data in (("k.json", b'{"name": "k"}'), ("k.cubin", b"\x7fELF" + bytes(range(64)))):
            (folder / name).write_bytes(data)
            self.metadata_group[name] = str(folder / name)


class _Loaded:
    """Stands for Triton's CompiledKernel: records what it was built from."""

    def __init__(self, src, group, hash):
        self.src, self.group, self.hash = src, group, hash


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_kernel_binary_is_compiled_again(damage, tmp_path, monkeypatch):
    monkeypatch.setattr(binary_cache, "_binary_ext", lambda compiled: "cubin")
    monkeypatch.setattr(binary_cache, "_compiled_kernel_class", lambda: _Loaded)
    made = tmp_path / "triton"
    made.mkdir()
    compiled = _Compiled(made)
    root = str(tmp_path / "cache")
    assert binary_cache.store(root, "key", compiled)
    record = tmp_path / "cache" / "binaries" / "key"
    for name in ("k.cubin", "k.json", binary_cache.SOURCE_FILE, cache_store.MANIFEST):
        damage(record / name)
        binary_cache._LOADED.clear()
        assert binary_cache.load(root, "key", kernel=None) is None, name   # the launch compiles through Triton
        assert binary_cache.store(root, "key", compiled)   # ... and keeps its binary again
        binary_cache._LOADED.clear()
        loaded = binary_cache.load(root, "key", kernel=None)
        assert loaded is not None and open(loaded.group["k.cubin"], "rb").read() == (made / "k.cubin").read_bytes()


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_tuning_choice_is_tuned_again(damage, tmp_path):
    """A damaged choice is no choice: the default config runs (and autotuning, on a GPU,
    stores a new one; python -m pytest tests/backend/test_gpu.py covers that there)."""
    meta = dict(xnumel=1 << 20, rnumel=1, reduction=False, file="f", signature={})
    key = autotune.tuning_key("", meta, "H200")
    chosen = autotune.candidate_configs(meta, interpret=False)[1]
    autotune.store_choice(str(tmp_path), key, chosen, [1.0, 0.5])
    assert autotune.launch_config(meta, str(tmp_path), "H200") == chosen
    damage(tmp_path / "autotune" / f"{key}.json")
    assert autotune.load_choice(str(tmp_path), key) is None
    assert autotune.launch_config(meta, str(tmp_path), "H200") == autotune.candidate_configs(meta, False)[0]
    autotune.store_choice(str(tmp_path), key, chosen, [1.0, 0.5])
    assert autotune.launch_config(meta, str(tmp_path), "H200") == chosen


BINARY_CHILD = r'''
import json, torch, surge
def f(x, w):
    return torch.nn.functional.gelu(x * w + 1.0).sum(-1)
x = torch.randn(300, 200, device="cuda"); w = torch.randn(200, device="cuda")
out = surge.compile(f, backend="triton")(x, w)
torch.cuda.synchronize()
print(json.dumps({"ok": bool(torch.allclose(out, f(x, w), atol=1e-4, rtol=1e-4)),
                  "binary_hits": surge.counters["binary_cache_hits"], "fallbacks": surge.counters["fallbacks"]}))
'''


@pytest.mark.skipif(not torch.cuda.is_available(), reason="kernel binaries are kept on GPUs")
def test_a_damaged_kernel_binary_on_the_gpu_is_compiled_again(tmp_path):
    """The real thing on a GPU: the damaged binary is never handed to the driver."""
    def child():
        env = dict(os.environ, SURGE_CACHE_DIR=str(tmp_path / "surge"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
                   SURGE_GRAPH_CACHE="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        out = subprocess.run([sys.executable, "-c", BINARY_CHILD], env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-3000:]}"
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert child() == {"ok": True, "binary_hits": 0, "fallbacks": 0}
    binaries = sorted((tmp_path / "surge" / "binaries").glob("*/*.cubin"))
    assert binaries
    for damage in DAMAGES:
        for path in binaries:
            damage(path)
        assert child() == {"ok": True, "binary_hits": 0, "fallbacks": 0}, damage.__name__
        assert all(cache_store._read_folder(str(p.parent)) is not None for p in binaries)
    assert child()["binary_hits"] >= 1   # the binaries kept again serve the next process
