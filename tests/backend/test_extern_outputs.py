"""Extern ops with several outputs, and the layouts of extern results, on both code generators.

An extern op's result is laid out as the op lays it out for its arguments *as
realized*. A lazy value is realized in the layout eager gave it when that layout is
dense (a transposed value stays transposed), so results come out as traced; where
an argument is realized otherwise, a stride-following op returns other strides than
eager's, and the loop IR must know them. The wrappers' run-time relayout guard must
never fire: each test replaces it with one that fails.
"""
import pytest
import torch
import torch.nn.functional as F

from surge.lowering.ir import ExternBuffer
from tests.backend_cpp.helpers import compile_cases

from .helpers import aten_graph, assert_outputs_match, compile_fn, randn, schedule_of

aten = torch.ops.aten

# An op shaped like the CUDA attention kernels: several tensors (one never read),
# then Python sizes; its first output follows its input's strides.
_LIB = torch.library.Library("surge_extern_test", "DEF")
_LIB.define("attention_like(Tensor q) -> (Tensor, Tensor, Tensor, SymInt, SymInt)")


def _attention_like(q):
    out = torch.empty_like(q)   # keeps q's strides, as cuDNN attention keeps the query's
    out.copy_(q * 2)
    return out, q.sum(-1), q.new_zeros(3), q.shape[0], q.shape[-1]


_LIB.impl("attention_like", _attention_like, "CPU")
_LIB.impl("attention_like", _attention_like, "Meta")


def scalars_and_unused_output(x):
    out, lse, _, rows, cols = torch.ops.surge_extern_test.attention_like(x.transpose(0, 1) + 1)
    return out + 1, lse * rows + cols


def sort_of_transposed_value(x):
    values, indices = torch.sort(x.t() * 2, dim=1)
    return values + 1, indices


def topk_of_permuted_value(x):
    values, indices = torch.topk(x.permute(2, 0, 1).exp(), 3, dim=-1)
    return values * 2, indices + 1


def max_dim_of_sliced_value(x):
    values, indices = torch.max(x[:, 1:].t().sigmoid(), dim=0)
    return values - 1, indices


def cumsum_of_transposed_value(x):
    return torch.cumsum(x.t() + 1, dim=0) * 3


def attention_of_transposed_values(x, w):
    b, t, c = x.shape
    q, k, v = (x @ w).split(c, dim=2)
    q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) * 1.5 for z in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2) + 1


CASES = {
    "scalars_and_unused_output": (scalars_and_unused_output, lambda: (randn(4, 6),)),
    "sort_of_transposed_value": (sort_of_transposed_value, lambda: (randn(5, 7),)),
    "topk_of_permuted_value": (topk_of_permuted_value, lambda: (randn(3, 4, 6),)),
    "max_dim_of_sliced_value": (max_dim_of_sliced_value, lambda: (randn(6, 5),)),
    "cumsum_of_transposed_value": (cumsum_of_transposed_value, lambda: (randn(4, 9),)),
    "attention_of_transposed_values": (attention_of_transposed_values, lambda: (randn(2, 5, 16), randn(16, 48))),
}


def _never_relayout(*args):
    raise AssertionError("an extern result was laid out otherwise than the loop IR assumed")


def _check(fn, compiled, make_inputs):
    inputs = make_inputs()
    actual, expected = compiled(*inputs), fn(*inputs)
    if fn is attention_of_transposed_values:   # the fused attention kernel rounds differently
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
    else:
        assert_outputs_match(actual, expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_triton_matches_eager_without_relayout(name, monkeypatch):
    fn, make_inputs = CASES[name]
    c = compile_fn(fn, *make_inputs())
    monkeypatch.setattr(c.module, "relayout", _never_relayout)
    _check(fn, c, make_inputs)


@pytest.fixture(scope="module")
def cpp_compiled():
    return compile_cases(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpp_matches_eager_without_relayout(name, cpp_compiled, monkeypatch):
    fn, make_inputs = CASES[name]
    c = cpp_compiled[name]
    monkeypatch.setattr(c.module, "restride", _never_relayout)
    _check(fn, c, make_inputs)


def test_only_read_elements_become_buffers_and_sizes_constants():
    s = schedule_of(scalars_and_unused_output, randn(4, 6))
    externs = [b for b in s.graph.buffers if isinstance(b, ExternBuffer)]
    assert [b.output_index for b in externs if b.parent] == [0, 1], "element 2 is never read"
    out = next(b for b in externs if b.output_index == 0)
    # the op keeps its input's strides: the input is realized transposed, as eager had it
    assert tuple(out.layout.stride) == (1, 6)
    # the sizes the op returns are folded into the kernel as constants: no extra extern
    assert len([b for b in externs if b.parent is None]) == 1


def test_traced_layouts_are_kept_when_arguments_are_realized_as_traced():
    x = randn(5, 7)
    s = schedule_of(lambda a: torch.sort(a, dim=0), x)
    values = next(b for b in s.graph.buffers if isinstance(b, ExternBuffer) and b.output_index == 0)
    assert tuple(values.layout.stride) == (7, 1)


def test_extern_result_layout_follows_realized_argument(monkeypatch):
    """Tracing saw sort of a transposed value (strides (1, 7)); with the value realized
    contiguous instead, sort's results follow the realized value, not tracing."""
    import surge.lowering.lower as lower

    gm = aten_graph(sort_of_transposed_value, randn(5, 7))
    sort_node = next(n for n in gm.graph.nodes if n.target is aten.sort.default)
    assert tuple(sort_node.meta["val"][0].stride()) == (1, 7)
    s = schedule_of(sort_of_transposed_value, randn(5, 7))
    children = [b for b in s.graph.buffers if isinstance(b, ExternBuffer) and b.parent]
    assert [tuple(b.layout.stride) for b in children] == [(1, 7), (1, 7)]   # realized as eager had it
    monkeypatch.setattr(lower.Lowering, "eager_layout", lambda self, t, traced: None)   # realize contiguous
    s = schedule_of(sort_of_transposed_value, randn(5, 7))
    children = [b for b in s.graph.buffers if isinstance(b, ExternBuffer) and b.parent]
    assert [tuple(b.layout.stride) for b in children] == [(5, 1), (5, 1)]


def test_a_lazy_value_taken_by_two_extern_calls_is_computed_once():
    """HF models build one attention mask and hand it to every layer's attention call:
    one buffer, not one per call."""
    from surge.lowering.ir import ComputedBuffer
    from surge.lowering.lower import lower_graph

    from .helpers import aten_graph

    def two_externs(x):
        mask = torch.where(x > 0, 0.0, float("-inf"))
        return torch.sort(mask, -1).values, torch.topk(mask, 2).values

    x = torch.randn(4, 8)
    graph, _ = lower_graph(aten_graph(two_externs, x), [x])
    computed = [b for b in graph.buffers if isinstance(b, ComputedBuffer)]
    assert len(computed) == 1, [str(b) for b in graph.buffers]


def library_call_and_output(x, w):
    b, t, c = x.shape
    q = (x @ w).view(b, t, 2, c // 2).transpose(1, 2)
    q = q * 1.5 + q.flip(-1) * 0.5   # as a rotary embedding: a pointwise value of the transposed query
    out, _, _, _, _ = torch.ops.surge_extern_test.attention_like(q)
    return out + 1, q


def test_a_library_operand_that_is_also_an_output_is_stored_once_as_eager_lays_it_out(monkeypatch):
    """A training forward hands the rotated query to attention and saves it for the
    backward (an output): one store, in eager's layout ([batch, seq, heads, dim] in
    memory, the rows attention kernels read), not a contiguous copy for the call and
    another for the output."""
    from surge.lowering.ir import ComputedBuffer

    inputs = (randn(2, 8, 16), randn(16, 16))
    s = schedule_of(library_call_and_output, *inputs)
    call = next(b for b in s.graph.buffers if isinstance(b, ExternBuffer) and "attention_like" in str(b.op))
    operand = next(b for b in s.graph.buffers if b.name == call.args[0].buffer)
    assert isinstance(operand, ComputedBuffer) and call.args[0].layout is None
    assert tuple(operand.layout.stride) == library_call_and_output(*inputs)[1].stride() == (128, 8, 16, 1)
    assert s.graph.outputs[1].arg.buffer == operand.name, "the output is the operand's buffer"
    c = compile_fn(library_call_and_output, *inputs)
    monkeypatch.setattr(c.module, "relayout", _never_relayout)
    inputs = (randn(2, 8, 16), randn(16, 16))
    for a, e in zip(c(*inputs), library_call_and_output(*inputs)):
        torch.testing.assert_close(a, e)


def test_triton_host_code_calls_overloads_by_names_bound_once():
    """The call's body names no ``torch.ops`` attribute chain (four lookups and a Python
    frame per call): a public torch function, or the function the overload forwards to,
    bound when the module loads; a custom op's overload too."""
    c = compile_fn(scalars_and_unused_output, randn(4, 6))
    body = c.source.split("def call(args):")[1]
    assert "torch.ops" not in body
    assert "surge_extern_test_attention_like_default = overload_function(" in c.source
    _check(scalars_and_unused_output, c, CASES["scalars_and_unused_output"][1])
    c = compile_fn(cumsum_of_transposed_value, randn(4, 9))
    assert "aten_cumsum_default_public = torch._C._VariableFunctions.cumsum" in c.source
    assert "= aten_cumsum_default_public(" in c.source.split("def call(args):")[1]
    _check(cumsum_of_transposed_value, c, CASES["cumsum_of_transposed_value"][1])
