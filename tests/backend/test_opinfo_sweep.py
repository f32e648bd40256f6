"""OpInfo sweep: torch's op database through the aot layer and this backend.

For each op below (those whose ATen forms surge lowers), a few small float32
samples (int32 for the integer-only ops in ``INT_OPS``) are traced by surge's aot layer, compiled into Triton kernels (run in
the interpreter without a GPU) and compared with eager. An op whose ATen
graph surge could not trace is skipped with the aot layer's reason; a wrong
result or a backend error fails.
"""
import operator
import os

import pytest
import torch
import torch.fx
from torch.utils import _pytree as pytree

from torch.testing._internal.common_methods_invocations import op_db

from surge.backends.triton import compile_aten_graph

from .helpers import assert_outputs_match

SWEPT = """
abs acos acosh add addcdiv addcmul amax amin any all argmax argmin asin asinh atan atan2 atanh
cat ceil clamp clamp_max clamp_min clone constant_pad_nd copysign cos cosh deg2rad div eq erf exp
exp2 expand expm1 flip floor fmod full_like gather ge gt hypot index_select isinf isnan le lerp
log log10 log1p log2 log_softmax logical_and logical_not logical_or logical_xor logsumexp lt
masked_fill maximum mean minimum mul native_layer_norm ne neg nn.functional.celu
nn.functional.elu nn.functional.embedding nn.functional.gelu nn.functional.hardsigmoid
nn.functional.hardswish nn.functional.hardtanh nn.functional.layer_norm nn.functional.leaky_relu
nn.functional.logsigmoid nn.functional.mish nn.functional.pad nn.functional.relu
nn.functional.relu6 nn.functional.rms_norm nn.functional.silu nn.functional.softplus
nn.functional.softsign nn.functional.tanhshrink permute pow prod rad2deg reciprocal remainder
repeat reshape round rsqrt rsub select_scatter sigmoid sign sin sinh slice slice_scatter softmax sqrt square
squeeze std sub
sum t tan tanh transpose tril triu true_divide trunc unsqueeze var var_mean where xlogy
signbit max.reduction_with_dim max.reduction_no_dim max.binary min.reduction_with_dim
min.reduction_no_dim min.binary split split_with_sizes unbind select narrow as_strided ones_like
zeros_like new_full new_ones new_zeros fill __getitem__ bitwise_and bitwise_or bitwise_xor bitwise_not
bitwise_left_shift bitwise_right_shift
""".split()
# ops without float support: swept on int32 samples
INT_OPS = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift"}

# ops whose results are views: nothing to compute, so no kernel is expected
VIEW_OPS = {"expand", "permute", "reshape", "slice", "squeeze", "t", "transpose", "unsqueeze", "split",
            "split_with_sizes", "unbind", "select", "narrow", "as_strided"}
MAX_SAMPLES = 2
MAX_NUMEL = 1024

OPS = {name: op for op in op_db
       for name in [op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")] if name in SWEPT}


def _small_samples(op):
    out = []
    dtype = torch.int32 if op.name in INT_OPS else torch.float32
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        leaves = [x for x in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
                  if isinstance(x, torch.Tensor)]
        if not leaves or any(x.numel() > MAX_NUMEL or x.numel() == 0 for x in leaves):
            continue
        out.append(sample)
        if len(out) == MAX_SAMPLES:
            break
    return out


def _graph_of(op, sample):
    """A torch-level graph of the op on the sample's tensors (placeholders in order)."""
    flat, spec = pytree.tree_flatten(((sample.input,) + tuple(sample.args), sample.kwargs))
    positions = [k for k, leaf in enumerate(flat) if isinstance(leaf, torch.Tensor)]

    def call(*tensors):
        leaves = list(flat)
        for k, t in zip(positions, tensors):
            leaves[k] = t
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        # Tensor.__getitem__ is a C descriptor that rejects proxies; indexing traces as getitem
        return (operator.getitem if op.name == "__getitem__" else op.op)(*args, **kwargs)

    params = ", ".join(f"arg{k}" for k in range(len(positions)))
    scope = {"call": call}
    exec(f"def program({params}):\n    return call({params})\n", scope)
    gm = torch.fx.symbolic_trace(scope["program"])
    return gm, [flat[k] for k in positions]


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_eager(name):
    from surge.aot import aot_compile
    from surge.options import Options

    op = OPS[name]
    samples = _small_samples(op)
    if not samples:
        pytest.skip("no small sample")
    made, backend_errors = [], []
    options = Options(raise_internal_errors=True, cache_dir=os.environ.get("SURGE_CACHE_DIR"))

    def compiler(aten_gm, example_inputs):
        try:
            made.append(compile_aten_graph(aten_gm, example_inputs, options))
        except Exception as error:  # this backend's failure fails the test, never skips it
            backend_errors.append(error)
            raise
        return made[-1]

    for sample in samples:
        gm, inputs = _graph_of(op, sample)
        expected = gm(*inputs)
        try:
            compiled = aot_compile(gm, inputs, fw_compiler=compiler, bw_compiler=compiler, options=options)
        except Exception as error:  # the aot layer's own limits are its tests' business
            if backend_errors:
                raise backend_errors[0]
            pytest.skip(f"aot layer: {type(error).__name__}: {error}"[:200])
        actual = compiled(*inputs)
        assert_outputs_match(actual, expected)
    if name not in VIEW_OPS:
        assert sum(len(c.kernel_names) for c in made) >= 1, "the op was not lowered to a kernel"
