"""Shared inputs and helpers of the graph-break corpus files (test_corpus_breaks_*.py)."""
import os
import sys
import traceback

import pytest

import surge
from corpus_harness import RecordingBackend, randn

PY312 = sys.version_info >= (3, 12)


def mat(i):
    return (randn(3, 4),)


def mat_grad(i):
    return (randn(3, 4, requires_grad=True),)


def expected_counts(counts, counts_312=None):
    """(graphs, breaks); Python 3.12 inlines list/dict/set comprehensions into their
    function (PEP 709), so a break inside one splits the function rather than a nested
    code object: some programs count differently there."""
    return counts_312 if PY312 and counts_312 is not None else counts


def check_raises_like_eager(fn, args, marker: str):
    """The compiled function raises what eager raises (type and message), and the
    traceback names the user's marked line."""
    with pytest.raises(Exception) as eager:
        fn(*args)
    compiled = surge.compile(fn, backend=RecordingBackend())
    with pytest.raises(type(eager.value)) as got:
        compiled(*args)
    assert str(got.value) == str(eager.value)
    frames = traceback.extract_tb(got.tb)
    assert any(marker in (f.line or "") and os.path.basename(f.filename) == os.path.basename(fn.__code__.co_filename)
               for f in frames), [f"{f.filename}:{f.lineno} {f.line}" for f in frames]
    return got.value
