"""One-graph checks of the capture-gap tests: eager results on fresh inputs, and the
structure (one graph, no break, no fallback, no recompile)."""
from __future__ import annotations

import copy

import surge
from frontend_helpers import compile_strict, same


def check_one_graph(fn, make_args, *, calls: int = 3, graphs: int = 1):
    """Compile ``fn``, run it on ``calls`` fresh argument tuples next to eager, and check
    it made ``graphs`` graphs with no break, fallback or recompile. Returns the recorder."""
    compiled, rec = compile_strict(fn)
    before = dict(surge.counters)
    for i in range(calls):
        args = make_args(i)
        expected = fn(*copy.deepcopy(args))
        same(compiled(*args), expected)
    counts = {name: surge.counters[name] - before.get(name, 0) for name in surge.counters}
    assert counts["graph_breaks"] == 0 and counts["fallbacks"] == 0, counts
    assert len(rec.graphs) == graphs and counts["graphs"] == graphs, counts
    assert counts["recompiles"] == 0 and counts["cache_hits"] == calls - 1, counts
    return rec
