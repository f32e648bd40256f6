"""CI's sample of CPython's test suite under surge: a fixed list of modules and
variants, each test method compared with its eager run (``runner.py``).

The differences found today are listed in ``known.py`` with their cause; the
test fails on a new difference and on a listed one that no longer differs (fixed:
take it off the list), like a strict xfail.
"""
import pytest

from tests.pysuite import known, runner

# (module, variants): about 45 s on a 2-core machine.
SAMPLE = (
    ("test_slice", ("plain", "graph", "tensor_int")),
    ("test_list", ("plain",)),
    ("test_bool", ("plain",)),
    ("test_scope", ("plain",)),
    ("test_with", ("plain",)),
    ("test_contextlib", ("plain",)),
)
# Compared in the full run only: seconds each under surge (a large repr, a long loop,
# 55-120 graph breaks).
TOO_SLOW_FOR_CI = {"ListTest.test_repr_large", "ListTest.test_free_after_iterating", "ListTest.test_setslice",
                   "BoolTest.test_math"}


@pytest.mark.parametrize("module,variants", SAMPLE, ids=[m for m, _ in SAMPLE])
def test_module_matches_eager(module, variants):
    pytest.importorskip(f"test.{module}", reason="this Python ships without its test suite")
    records = runner.run_module(module, variants,
                                select=lambda cls, name: f"{cls.__name__}.{name}" not in TOO_SLOW_FOR_CI)
    compared = [r for r in records if r.status in ("same", "differs", "timeout")]
    assert len(compared) >= 0.5 * len(records), f"{module}: most tests were not compared: {runner.totals(records)}"
    differs = {(r.test, r.variant): r for r in records if r.status in ("differs", "timeout")}
    expected = {key for key in known.DIFFERENCES.get(module, {}) if key[1] in variants}
    new = [differs[key].line() for key in sorted(set(differs) - expected)]
    fixed = sorted(expected - set(differs))
    assert not new, f"{module}: new differences from eager:\n" + "\n".join(new)
    assert not fixed, f"{module}: these no longer differ, take them off known.DIFFERENCES: {fixed}"
