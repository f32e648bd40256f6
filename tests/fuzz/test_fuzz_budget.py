"""CI's fixed-seed fuzzing budget, and checks that the fuzzer's checker and
minimiser can see and shrink a difference at all.

``test_fixed_seed_programs_match_eager`` runs programs 0..COUNT-1 of SEED (every
DEFAULT_EVERY-th with surge's default backend): about a minute on 2 cores. The
programs that differ today are listed in KNOWN with the corpus program their
minimised form is (tests/fuzz/corpus); a new difference or a listed program that
no longer differs fails the test.
"""
import torch

from tests.fuzz import checker, generator
from tests.fuzz.__main__ import backend_for
from tests.fuzz.minimise import minimise

SEED = 0
COUNT = 250
DEFAULT_EVERY = 25

# program index -> the corpus program its difference minimises to
KNOWN: dict[int, str] = {}


def test_fixed_seed_programs_match_eager():
    found = {}
    for index in range(COUNT):
        program = generator.generate(SEED, index, backend_for(index, DEFAULT_EVERY))
        difference = checker.check_source(program.source())
        if difference is not None:
            found[index] = str(difference)
    new = {i: d for i, d in found.items() if i not in KNOWN}
    fixed = sorted(set(KNOWN) - set(found))
    assert not new, "new differences (python -m tests.fuzz --seed 0 --start I --count 1 minimises one):\n" + \
        "\n".join(f"{i}: {d}" for i, d in new.items())
    assert not fixed, f"programs that no longer differ, take them off KNOWN: {fixed}"


def _off_by_one(gm, example_inputs):
    """A wrong backend: every tensor the graph returns is one too large."""
    def run(*args):
        out = gm(*args)
        bump = lambda v: v + 1 if isinstance(v, torch.Tensor) else v  # noqa: E731
        return type(out)(bump(v) for v in out) if isinstance(out, (list, tuple)) else bump(out)
    return run


def test_checker_sees_a_wrong_result_and_the_minimiser_shrinks_it():
    program = generator.generate(SEED, 1)
    assert checker.check_source(program.source()) is None
    difference = checker.check_source(program.source(), backend=_off_by_one)
    assert difference is not None and difference.aspect == "result", difference

    def still_differs(candidate):
        again = checker.check_source(candidate.source(), backend=_off_by_one)
        return again is not None and again.aspect == "result"

    small = minimise(program, still_differs, max_checks=60)
    assert len(small.source()) < len(program.source())
    assert checker.check_source(small.source(), backend=_off_by_one) is not None


def test_checker_sees_a_lost_side_effect(monkeypatch):
    source = generator.generate(SEED, 1).source().replace(
        "    return t0,", "    LOG.append(len(lst))\n    return t0,")
    assert checker.check_source(source) is None
    # A compiled side that skips a write to module state must be caught: simulated
    # by clearing LOG after each compiled call only.
    original = checker.observe

    def observe_then_forget(fn, x, n, ns):
        seen = original(fn, x, n, ns)
        if fn is not ns.get("f"):
            ns["LOG"].clear()
            seen["state"] = checker.snapshot(ns)
        return seen

    monkeypatch.setattr(checker, "observe", observe_then_forget)
    difference = checker.check_source(source)
    assert difference is not None and difference.aspect == "state", difference
