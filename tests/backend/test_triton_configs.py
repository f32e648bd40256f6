"""Default launch configs (what users get without autotuning), and kernels correct under them."""
import pytest
import torch.nn.functional as F

from surge.runtime import autotune

from .helpers import assert_matches_eager, compile_fn, randn
from .structure_programs import layer_norm_gelu, pointwise_chain, softmax


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path, monkeypatch):
    """Modules of this file's programs stay out of the session's cache (other tests
    compile some of the same programs and expect a fresh compile)."""
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path / "surge_cache"))


def test_long_rows_run_one_per_program():
    assert autotune.persistent_default(32768, 4096) == dict(XBLOCK=1, RBLOCK=4096, num_warps=4, num_stages=1)
    assert autotune.persistent_default(32768, 8192)["num_warps"] == 8
    assert autotune.persistent_default(32768, 3000)["RBLOCK"] == 4096   # padded to a power of 2


def test_short_rows_share_a_program_unless_the_grid_would_be_small():
    many = autotune.persistent_default(32768, 1024)
    assert (many["XBLOCK"], many["num_warps"]) == (2, 4)
    assert autotune.persistent_default(32768, 64)["XBLOCK"] == 32
    few = autotune.persistent_default(300, 64)
    assert few["XBLOCK"] < 32 and -(-300 // few["XBLOCK"]) >= autotune.MIN_PROGRAMS


def test_pointwise_block_follows_cost_and_size():
    assert autotune.pointwise_default(1 << 27) == dict(XBLOCK=1024, num_warps=4, num_stages=1)
    heavy = autotune.pointwise_default(1 << 27, costly_ops=30)
    assert (heavy["XBLOCK"], heavy["num_warps"]) == (2048, 8)
    small = autotune.pointwise_default(64 * 1024)
    assert small["XBLOCK"] == 256 and small["num_warps"] == 1   # 256 programs, not 64
    # compute-bound and small: the block shrinks, the warps stay (one element per thread)
    small_heavy = autotune.pointwise_default(64 * 1024, costly_ops=30)
    assert (small_heavy["XBLOCK"], small_heavy["num_warps"]) == (256, 8)
    assert autotune.pointwise_default(100, costly_ops=30) == dict(XBLOCK=128, num_warps=4, num_stages=1)
    assert autotune.pointwise_default(100)["XBLOCK"] == 128


def test_kernels_carry_their_cost():
    chain = compile_fn(pointwise_chain, randn(7, 9), randn(9))
    gelu = compile_fn(lambda x, y: F.gelu(x + y), randn(7, 9), randn(9))
    (chain_meta,), (gelu_meta,) = chain.module.KERNELS.values(), gelu.module.KERNELS.values()
    assert chain_meta["costly_ops"] >= autotune.COMPUTE_BOUND_OPS > gelu_meta["costly_ops"] >= 1
    assert autotune.candidate_configs(chain_meta, interpret=False)[0]["num_warps"] >= \
        autotune.candidate_configs(gelu_meta, interpret=False)[0]["num_warps"]


@pytest.mark.parametrize("fn, shape, blocks", [(layer_norm_gelu, (3, 4096), dict(XBLOCK=1, RBLOCK=4096)),
                                               (softmax, (20, 1000), dict(XBLOCK=1, RBLOCK=1024)),
                                               (pointwise_chain, (40, 100), dict(XBLOCK=256))])
def test_kernels_are_correct_with_the_gpu_defaults(monkeypatch, fn, shape, blocks):
    """The interpreter normally runs small blocks; here it runs the configs a GPU gets."""
    monkeypatch.setattr(autotune, "candidate_configs",
                        lambda meta, interpret, real=autotune.candidate_configs: real(meta, False))
    args = [randn(*shape)] + [randn(shape[-1]) for _ in range(fn.__code__.co_argcount - 1)]
    c = compile_fn(fn, *args)
    fresh = [randn(*shape)] + [randn(shape[-1]) for _ in range(len(args) - 1)]
    assert_matches_eager(fn, c, *fresh, atol=1e-5, rtol=1e-5)
    (launch,) = c.launchers.values()
    assert {k: launch.state["config"][k] for k in blocks} == blocks
