"""An index out of range raises in generated kernels as it does in eager.

Gathers (embedding, index_select, gather, ``x[idx]``) and scatters (``x[idx] = v``,
``index_copy_``, ``scatter_``) check each index value they read against its dim's size:
C++ kernels report it to the host code, Triton kernels assert (the interpreter raises).
The error is eager's type, and names the user's line (which eager's message does not:
a fallback to eager cannot pass these tests). In-range negative indices count from the
end where eager's op counts them so (advanced indexing) and raise where it does not.
"""
import pytest
import torch
import torch.nn.functional as F

import surge

BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.skipif(
    torch.cuda.is_available(), reason="a device-side assert ends the CUDA context: interpreter only"))]


def _embedding(w, i):
    return F.embedding(i, w) * 2


def _index_select(w, i):
    return w.index_select(0, i) * 2


def _gather(w, i):
    return w.gather(0, i.view(-1, 1).expand(-1, w.shape[1])) + 1


def _getitem(w, i):
    return w[i] * 2


def _getitem_inner(w, i):
    return w[:, i] + 1


def _setitem(w, i):
    y = w * 2
    y[i] = 1.0
    return y


def _index_copy(w, i):
    y = w * 2
    y.index_copy_(0, i, torch.ones(i.shape[0], w.shape[1]))
    return y


def _scatter(w, i):
    y = w * 2
    return y.scatter_(0, i.view(-1, 1).expand(-1, w.shape[1]), torch.ones(i.shape[0], w.shape[1]))


# op, the exception eager raises, whether eager takes an in-range negative index
CASES = [(_embedding, IndexError, False), (_index_select, IndexError, False), (_gather, RuntimeError, False),
         (_getitem, IndexError, True), (_getitem_inner, IndexError, True), (_setitem, IndexError, True),
         (_index_copy, IndexError, False), (_scatter, RuntimeError, False)]
IDS = [fn.__name__[1:] for fn, _, _ in CASES]


def _weights():
    return torch.randn(6, 6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,error,takes_negative", CASES, ids=IDS)
def test_index_out_of_range_raises_as_eager(backend, fn, error, takes_negative):
    compiled = surge.compile(fn, backend=backend, fullgraph=True)
    w = _weights()
    good = torch.randperm(6)[:3]
    torch.testing.assert_close(compiled(w, good), fn(w, good))
    for bad in (torch.tensor([1, 6, 0]), torch.tensor([0, -7, 2])):
        with pytest.raises(error):
            fn(w, bad)   # the test's premise: eager raises this
        with pytest.raises(error, match=r"test_index_checks\.py:\d+: .*out of bounds for dimension \d with size 6"):
            compiled(w, bad)
    # a call after a reported index starts clean
    torch.testing.assert_close(compiled(w, good), fn(w, good))
    negative = torch.tensor([-1, 2, -6])
    if takes_negative:
        torch.testing.assert_close(compiled(w, negative), fn(w, negative))
    else:
        with pytest.raises(error):
            fn(w, negative)
        with pytest.raises(error, match=r"test_index_checks\.py:\d+: "):
            compiled(w, negative)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_gathers_name_their_own_lines(backend):
    """Two gathers in one kernel: the error names the one whose index is out of range."""
    def fn(table, positions, tokens, pos):
        a = F.embedding(tokens, table)
        b = positions[pos]
        return a + b

    compiled = surge.compile(fn, backend=backend, fullgraph=True)
    table, positions = torch.randn(10, 8), torch.randn(4, 8)
    tokens, pos = torch.randint(0, 10, (2, 3)), torch.randint(-4, 4, (2, 3))
    torch.testing.assert_close(compiled(table, positions, tokens, pos), fn(table, positions, tokens, pos))
    line = fn.__code__.co_firstlineno
    with pytest.raises(IndexError, match=rf"test_index_checks\.py:{line + 1}: embedding"):
        compiled(table, positions, torch.full((2, 3), 10), pos)
    with pytest.raises(IndexError, match=rf"test_index_checks\.py:{line + 2}: index"):
        compiled(table, positions, tokens, torch.full((2, 3), 4))
