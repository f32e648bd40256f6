"""Structure: the kernels and extern calls typical programs become, and their results.

Each program runs through lowering, scheduling, Triton codegen and the host
wrapper (in the interpreter without a GPU) and must equal eager on fresh
random inputs; every generated kernel is also compiled for sm_90.
"""
import torch

from surge.runtime.target_compile import compile_in_subprocess
from surge.runtime.triton_mode import interpreting

from .helpers import assert_matches_eager, compile_fn, randn
from .structure_programs import gelu_linear, layer_norm_gelu, pointwise_chain, rms_norm, softmax

aten = torch.ops.aten


def _externs(compiled):
    return [s.buffer.op for s in compiled.schedule.externs]




COMPILED_PATHS = []


def _compile(fn, *inputs, **kw):
    c = compile_fn(fn, *inputs, **kw)
    COMPILED_PATHS.append(c.path)
    return c


def test_gelu_of_linear_is_one_extern_matmul_and_one_kernel():
    x, w, b, r = randn(8, 32), randn(32, 16), randn(16), randn(8, 16)
    c = _compile(gelu_linear, x, w, b, r)
    assert _externs(c) == [aten.mm.default]
    assert c.kernel_names == ["triton_fused_add_gelu_0"]
    assert_matches_eager(gelu_linear, c, randn(8, 32), randn(32, 16), randn(16), randn(8, 16))


def test_layer_norm_gelu_is_one_kernel():
    args = randn(6, 48), randn(48), randn(48)
    c = _compile(layer_norm_gelu, *args)
    assert len(c.kernel_names) == 1 and not _externs(c)
    assert c.schedule.kernels[0].internal, "the statistics stay in registers"
    assert_matches_eager(layer_norm_gelu, c, randn(6, 48), randn(48), randn(48))


def test_softmax_is_one_kernel_persistent_and_looped():
    for limit in (8192, 16):   # a row in one tile, and a row in chunks of the loop
        c = _compile(softmax, randn(5, 37), persistent_reduction_limit=limit)
        assert len(c.kernel_names) == 1
        meta = next(iter(c.module.KERNELS.values()))
        assert meta["persistent"] == (limit > 37)
        assert_matches_eager(softmax, c, randn(5, 37))


def test_rms_norm_with_casts_is_one_kernel():
    x, w = randn(4, 64, dtype=torch.bfloat16), randn(64, dtype=torch.bfloat16)
    c = _compile(rms_norm, x, w)
    assert len(c.kernel_names) == 1 and not _externs(c)
    x2, w2 = randn(4, 64, dtype=torch.bfloat16), randn(64, dtype=torch.bfloat16)
    assert_matches_eager(rms_norm, c, x2, w2, atol=2e-2, rtol=2e-2)
    # fp16/bf16 are computed in fp32: loads convert up, the explicit cast rounds
    # (in Triton's interpreter through a helper that rounds to nearest even, as GPUs do)
    rounding = "_to_bf16_rtne(" if interpreting() else ".to(tl.bfloat16).to(tl.float32)"
    assert ".to(tl.float32)" in c.source and rounding in c.source


def test_sixty_pointwise_ops_are_one_kernel():
    c = _compile(pointwise_chain, randn(7, 9), randn(9))
    assert len(c.kernel_names) == 1
    assert c.source.count("tl.store(") == 1, "no intermediate reaches memory"
    assert_matches_eager(pointwise_chain, c, randn(7, 9), randn(9))


def test_kernels_compile_for_sm90():
    if not COMPILED_PATHS:
        for fn, args in ((gelu_linear, (randn(8, 32), randn(32, 16), randn(16), randn(8, 16))),
                         (layer_norm_gelu, (randn(6, 48), randn(48), randn(48))),
                         (softmax, (randn(5, 37),)), (pointwise_chain, (randn(7, 9), randn(9)))):
            _compile(fn, *args)
    _compile(softmax, randn(5, 37), persistent_reduction_limit=16)
    results = compile_in_subprocess(sorted(set(COMPILED_PATHS)))
    assert results and all(v == "ok" for v in results.values()), results
