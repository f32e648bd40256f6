"""On a CUDA device: graph-level backend behaviour found on the H200 bench.

- SDPA in a GPT block traces to a CUDA attention op with several outputs (tuples
  with sizes and unused tensors): the graph compiles with no fallback and runs
  its attention in the ATen kernel eager uses;
- the masked softmax of explicit attention is one kernel;
- the lm head's tied weight reaches the matmul without a copy;
- huge reductions over few rows are split and match eager;
- a compiled forward of the bundled GPT peaks no higher than eager in memory.
"""
import pytest
import torch
import torch.nn.functional as F

import surge
from surge.lowering.ir import ExternBuffer, TensorArg
from surge.schedule.groups import KernelGroup

from .helpers import assert_matches_eager, compile_fn, schedule_of
from .test_extern_fusion import masked_softmax_attention

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

aten = torch.ops.aten
BF16 = dict(atol=3e-2, rtol=3e-2)


def _rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda").to(dtype)


def _gpt_block(width=256, heads=4, seq=128):
    from surge.models.gpt import Block, GPTConfig

    torch.manual_seed(0)
    config = GPTConfig(block_size=seq, n_embd=width, n_head=heads, use_sdpa=True)
    return Block(config).to(device="cuda", dtype=torch.bfloat16).eval()


def test_sdpa_block_compiles_without_fallback():
    block = _gpt_block()
    compiled = surge.compile(block, backend="triton")
    x = _rand(2, 128, 256)
    with torch.no_grad():
        expected, actual = block(x), compiled(x)
    torch.testing.assert_close(actual, expected, **BF16)
    assert surge.counters["fallbacks"] == 0
    assert surge.counters["kernels"] > 0


def test_sdpa_graph_calls_the_cuda_attention_op():
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True).transpose(1, 2) * 2
    q, k, v = (_rand(2, 128, 4, 64) for _ in range(3))
    c = compile_fn(attention, q, k, v)
    ops = [s.buffer.op for s in c.schedule.externs if s.buffer.op is not None]
    assert any("scaled_dot_product" in str(op) for op in ops), ops
    assert_matches_eager(attention, c, *(_rand(2, 128, 4, 64) for _ in range(3)), **BF16)


def test_masked_softmax_is_one_kernel_on_gpu():
    mask = torch.tril(torch.ones(16, 16, dtype=torch.bool, device="cuda")).view(1, 1, 16, 16)
    args = [_rand(2, 4, 16, 8) for _ in range(3)] + [mask]
    s = schedule_of(masked_softmax_attention, *args)
    assert sum(1 for k in s.kernels if k.is_reduction) == 1
    kinds = ["kernel" if isinstance(step, KernelGroup) else "extern" for step in s.steps]
    assert kinds[-3:] == ["extern", "kernel", "extern"], kinds
    c = compile_fn(masked_softmax_attention, *args)
    assert_matches_eager(masked_softmax_attention, c, *([_rand(2, 4, 16, 8) for _ in range(3)] + [mask]), **BF16)


def test_lm_head_matmul_reads_its_weight_transposed_in_place():
    """The 50257-wide head pads its weight to 50264 rows (lowering/matmul_padding.py): one copy
    kernel in the weight's own layout, which the matmul reads transposed, as it reads the
    unpadded weight when padding is off: never a transposing copy."""
    def lm_head(x, w):
        return x @ w.t()
    x, w = _rand(64, 768), _rand(50257, 768)
    s = schedule_of(lm_head, x, w)
    assert len(s.kernels) == 1, [str(k) for k in s.kernels]
    mm = [step.buffer for step in s.steps if isinstance(getattr(step, "buffer", None), ExternBuffer)][0]
    assert isinstance(mm.args[1], TensorArg) and tuple(mm.args[1].layout.stride) == (1, 768)
    assert tuple(mm.args[1].layout.shape) == (768, 50264)


@pytest.mark.parametrize("program", ["sum", "sum0", "var", "argmax", "any"])
def test_split_reductions_match_eager_on_gpu(program):
    fns = {"sum": lambda x: x.sum(), "sum0": lambda x: x.reshape(-1, 8).sum(0), "var": lambda x: x.var(),
           "argmax": lambda x: x.argmax(), "any": lambda x: (x > 5.5).any()}
    fn = fns[program]
    x = torch.randn(2 ** 24, device="cuda")
    c = compile_fn(fn, x)
    assert len(c.kernel_names) >= 2, "split into partials and their combination"
    x = torch.randn(2 ** 24, device="cuda")
    torch.testing.assert_close(c(x), fn(x), atol=1e-2, rtol=1e-4)


def test_compiled_gpt_forward_peaks_no_higher_than_eager():
    from surge.models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    config = GPTConfig(vocab_size=8192, block_size=256, n_layer=4, n_head=8, n_embd=512)
    model = GPT(config).to(device="cuda", dtype=torch.bfloat16).eval()
    compiled = surge.compile(model, backend="triton")
    idx = torch.randint(0, 8192, (8, 256), device="cuda")

    def peak(fn):
        with torch.no_grad():
            fn(idx)   # warm: compile, caches
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            out = fn(idx)
            torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base, out

    eager_peak, expected = peak(model)
    surge_peak, actual = peak(compiled)
    assert surge.counters["fallbacks"] == 0
    torch.testing.assert_close(actual, expected, **BF16)
    assert surge_peak <= eager_peak, (surge_peak, eager_peak)
