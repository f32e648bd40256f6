"""On a CUDA device: real kernels, autotuning and its disk cache, bandwidth sanity."""
import os

import pytest
import torch
import torch.nn.functional as F

from .helpers import assert_matches_eager, compile_fn

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)


def _rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda").to(dtype)


PROGRAMS = {
    "layer_norm_gelu": (lambda x, w, b: F.gelu(F.layer_norm(x, (x.shape[-1],), w, b)),
                        lambda d: (_rand(512, 4096, dtype=d), _rand(4096, dtype=d), _rand(4096, dtype=d))),
    "softmax": (lambda x: torch.softmax(x, -1), lambda d: (_rand(1024, 1000, dtype=d),)),
    "softmax_long_rows": (lambda x: torch.softmax(x, -1), lambda d: (_rand(64, 50000, dtype=d),)),
    "rms_norm": (lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w,
                 lambda d: (_rand(256, 2048, dtype=d), _rand(2048, dtype=d))),
    "reductions": (lambda x: (x.sum(0), x.amax(1), x.argmax(1), x.var(1)), lambda d: (_rand(300, 700, dtype=d),)),
    "gelu_linear": (lambda x, w, b, r: F.gelu(x @ w + b) + r,
                    lambda d: (_rand(64, 128, dtype=d), _rand(128, 256, dtype=d), _rand(256, dtype=d),
                               _rand(64, 256, dtype=d))),
    "gather": (lambda t, i: F.embedding(i, t) * 2, lambda d: (_rand(1000, 64, dtype=d),
                                                             torch.randint(0, 1000, (77, 5), device="cuda"))),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs_match_eager_on_gpu(name, dtype):
    fn, make = PROGRAMS[name]
    c = compile_fn(fn, *make(dtype))
    tol = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else dict(atol=1e-4, rtol=1e-4)
    if name == "reductions" and dtype == torch.bfloat16:
        pytest.skip("argmax ties in bf16 differ legitimately")
    assert_matches_eager(fn, c, *make(dtype), **tol)


def test_autotuning_result_is_cached_on_disk():
    fn, make = PROGRAMS["softmax"]
    c = compile_fn(fn, *make(torch.float32), autotune=True)
    assert_matches_eager(fn, c, *make(torch.float32), atol=1e-5, rtol=1e-5)
    folder = os.path.join(os.environ["SURGE_CACHE_DIR"], "autotune")
    assert os.listdir(folder)


def test_peak_memory_of_compiled_call_is_not_above_eager():
    def fn(x, w):
        a = (x * 2).sin() @ w
        b = torch.softmax(a, -1) @ w
        return torch.relu(b) + a

    x, w = _rand(2048, 2048), _rand(2048, 2048)
    c = compile_fn(fn, x, w)
    c(x, w)   # first call: kernel compilation out of the measurement

    def peak(run):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = run(x, w)
        torch.cuda.synchronize()
        del out
        return torch.cuda.max_memory_allocated() - before

    eager_peak, surge_peak = peak(fn), peak(c)
    assert surge_peak <= eager_peak, (surge_peak, eager_peak)


def test_repeat_launches_skip_tritons_binding_and_stay_correct():
    """After the first launch, kernels launch through the compiled binary directly; a
    pointer whose 16-byte alignment differs from the first call goes back through Triton."""
    fn = lambda x, y: torch.sigmoid(x) * y + 1  # noqa: E731
    x, y = _rand(1000, 256), _rand(1000, 256)
    c = compile_fn(fn, x, y)
    (launch,) = c.launchers.values()
    c(x, y)
    direct = launch.state.get("direct")
    assert direct is not None, "this Triton's launch interface was not recognised"
    calls = []

    def counting(args):
        calls.append((args, direct(args)))
        return calls[-1][1]

    launch.state["direct"] = counting
    for _ in range(3):
        fresh = (_rand(1000, 256), _rand(1000, 256))
        assert_matches_eager(fn, c, *fresh, atol=1e-5, rtol=1e-5)
    assert [took for _, took in calls] == [True] * 3
    args = calls[-1][0]
    shifted = torch.empty(args[0].numel() + 1, dtype=args[0].dtype, device="cuda")[1:].view_as(args[0])
    assert direct((shifted, *args[1:])) is False  # 4 bytes past an aligned start


def test_triton_36s_launcher_is_called_through_its_c_function():
    """With Triton 3.6 (the version whose launcher layout ``launcher._c_launch`` knows) a warm
    launch calls the C launch itself, not the launcher's Python ``__call__``."""
    import triton

    if not triton.__version__.startswith("3.6"):
        pytest.skip(f"Triton {triton.__version__}: launched through its launcher's call")
    fn = lambda x: torch.sigmoid(x) * 2  # noqa: E731
    c = compile_fn(fn, _rand(1000, 256)).warmup()
    (launch,) = c.launchers.values()
    assert launch.state["direct"].calls_c_launch
    assert_matches_eager(fn, c, _rand(1000, 256), atol=1e-5, rtol=1e-5)


def test_after_warmup_every_kernel_launches_its_binary_directly():
    """``Executable.warmup()`` compiles and binds each kernel: the first call (what a CUDA
    graph records) binds nothing and launches every kernel through its binary."""
    from surge.counters import counters

    fn = lambda x, w, b, r: F.gelu(x @ w + b).softmax(-1) + r  # noqa: E731
    inputs = (_rand(64, 128), _rand(128, 256), _rand(256), _rand(64, 256))
    c = compile_fn(fn, *inputs).warmup()
    assert all(launch.state.get("direct") is not None for launch in c.launchers.values())
    bound = counters["kernel_bindings"]
    assert_matches_eager(fn, c, *(_rand(*t.shape) for t in inputs), atol=1e-4, rtol=1e-4)
    assert counters["kernel_bindings"] == bound


def test_a_symbolic_kernel_launches_one_binary_at_every_size(tmp_path):
    """A kernel of symbolic sizes compiles one binary per config, launched directly at every
    size: a new size (multiple of 16 or not) passes through Triton's launcher not once."""
    from surge.backends.triton import compile_aten_graph
    from surge.options import Options

    from .test_symbolic_sizes import symbolic_graph

    fn = lambda x: (x.softmax(-1) * 2).sum(-1)  # noqa: E731
    gm, examples = symbolic_graph(fn, [_rand(48, 100)], {0: (0,)})
    exe = compile_aten_graph(gm, examples, Options(cache_dir=str(tmp_path), graph_cache=False,
                                                   raise_internal_errors=True)).warmup()
    (launch,) = exe.launchers.values()
    assert launch.meta.get("symbolic")
    for rows in (48, 17, 64, 999, 33):
        x = _rand(rows, 100)
        torch.testing.assert_close(exe(x), fn(x), atol=1e-4, rtol=1e-4)
    assert len(launch.binaries) <= 2 and all(b is not None for b in launch.binaries.values())
    assert all(direct is not None for _, _, direct, _, _ in launch.launches.values())


WARM_PROGRAM = """
import json, os, torch, surge
from surge.counters import counters
def f(x, w):
    return torch.nn.functional.gelu(x * w + 1.0).sum(-1)
x = torch.randn(300, 200, device="cuda"); w = torch.randn(200, device="cuda")
out = surge.compile(f, backend="triton")(x, w)
torch.cuda.synchronize()
cubins = [n for _, _, names in os.walk(os.environ["TRITON_CACHE_DIR"]) for n in names if n.endswith(".cubin")]
print(json.dumps({"ok": bool(torch.allclose(out, f(x, w), atol=1e-4, rtol=1e-4)),
                  "binary_hits": counters["binary_cache_hits"], "triton_cubins": len(cubins)}))
"""


def test_a_warm_process_launches_kept_binaries_without_tritons_compiler(tmp_path):
    """The second process finds the kernel's binary in surge's cache: Triton compiles
    nothing into its own cache (a new, empty one here)."""
    import json
    import subprocess
    import sys

    def run(triton_dir):
        env = dict(os.environ, SURGE_CACHE_DIR=str(tmp_path / "surge"), TRITON_CACHE_DIR=str(triton_dir),
                   SURGE_GRAPH_CACHE="1")
        proc = subprocess.run([sys.executable, "-c", WARM_PROGRAM], env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])
    cold = run(tmp_path / "triton_cold")
    warm = run(tmp_path / "triton_warm")
    assert cold["ok"] and warm["ok"]
    assert cold["binary_hits"] == 0 and cold["triton_cubins"] > 0
    assert warm["binary_hits"] >= 1 and warm["triton_cubins"] == 0
