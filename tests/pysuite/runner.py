"""Run CPython test modules (``test.test_list``, ...) with every test method compiled
by surge, next to the same method run eagerly, and report where the two differ.

For each test method and variant (``variants.py``): a fresh TestCase instance runs
the method eagerly, another runs it compiled (setUp, tearDown and cleanups run as
unittest runs them, only the method is replaced); their outcomes
(``outcome.py``) must be equal. A difference is re-checked against a second eager
run, so a test whose eager outcome varies is reported as unstable, not as a surge
bug. Each run has a time limit (a SIGALRM raising ``TestTimeout``).
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
import doctest
import importlib
import io
import os
import signal
import time
import unittest

import surge

from tests.fuzz.checker import restore_builtins

from . import skips, variants
from .outcome import Outcome, RecordingResult, TestTimeout, Verdict


@dataclasses.dataclass
class Record:
    module: str
    test: str                  # Class.method
    variant: str
    status: str                # same / differs / timeout / skipped / unstable / slow-eager / runner-error
    reason: str = ""           # why skipped
    eager: Outcome | None = None
    compiled: Outcome | None = None
    fallbacks: int = 0
    graph_breaks: int = 0
    graphs: int = 0

    def line(self) -> str:
        head = f"{self.module}::{self.test} [{self.variant}]"
        if self.status == "differs":
            return (f"{head}: eager {self.eager.summary()} | surge {self.compiled.summary()}"
                    + _indent(self.compiled.details()))
        return f"{head}: {self.status} {self.reason}"


def _indent(text: str) -> str:
    return "".join(f"\n      {line}" for line in text.splitlines()[:4])


@dataclasses.dataclass
class Limits:
    eager_seconds: float = 5.0      # slower eagerly: not compiled (the report says so)
    compiled_seconds: float = 30.0  # past this a compiled run is a timeout (a difference)


def _alarm(signum, frame):
    raise TestTimeout()


@contextlib.contextmanager
def _time_limit(seconds: float):
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_once(cls: type, method_name: str, body, seconds: float) -> Outcome:
    """Run one fresh instance of ``cls.method_name`` with the method replaced by
    ``body(instance)``; what it printed is part of the outcome."""
    test = cls(method_name)

    def method():
        return body(test)

    # unittest reads skip and expected-failure marks from the method it calls.
    for mark in ("__unittest_skip__", "__unittest_skip_why__", "__unittest_expecting_failure__"):
        if hasattr(getattr(cls, method_name), mark):
            setattr(method, mark, getattr(getattr(cls, method_name), mark))
    setattr(test, method_name, method)
    result = RecordingResult()
    out = io.StringIO()
    saved_builtins = dict(vars(builtins))
    start = time.perf_counter()
    try:
        # What tests write to stderr is noise in the report, unless surge's logs are asked for.
        err = contextlib.nullcontext() if os.environ.get("SURGE_LOGS") else contextlib.redirect_stderr(io.StringIO())
        with _time_limit(seconds), contextlib.redirect_stdout(out), err:
            test.run(result)
    except TestTimeout:  # fired outside the test's own exception handling (in unittest)
        result.outcome.verdict = Verdict("timeout")
        result._main = result.outcome.verdict
    outcome = result.finish()
    outcome.stdout = out.getvalue()
    outcome.seconds = time.perf_counter() - start
    outcome.builtins_changed = tuple(restore_builtins(saved_builtins))
    return outcome


def iter_test_methods(module) -> list[tuple[type, str]]:
    """(class, method name) of every unittest test method in ``module``, in the order
    unittest's loader gives them; doctests and other non-method cases are left out."""
    found, seen = [], set()

    def walk(suite):
        for item in suite:
            if isinstance(item, unittest.TestSuite):
                walk(item)
            elif isinstance(item, unittest.TestCase) and not isinstance(
                    item, (doctest.DocTestCase, unittest.FunctionTestCase)):
                name = getattr(item, "_testMethodName", None)
                key = (type(item), name)
                if name and callable(getattr(type(item), name, None)) and key not in seen:
                    seen.add(key)
                    found.append(key)

    walk(unittest.TestLoader().loadTestsFromModule(module))
    return found


def compare_method(module_name, cls, name, variant, limits: Limits) -> Record:
    test_id = f"{cls.__name__}.{name}"
    fn = getattr(cls, name)
    try:
        eager_body = variants.build(variant, fn, compiled=False)
    except variants.VariantUnavailable as e:
        return Record(module_name, test_id, variant, "skipped", f"variant unavailable: {e}")
    eager = run_once(cls, name, eager_body, limits.eager_seconds)
    if eager.verdict.kind == "timeout":
        return Record(module_name, test_id, variant, "slow-eager", f"over {limits.eager_seconds} s eagerly")
    surge.reset()
    before = dict(surge.counters)
    compiled = run_once(cls, name, variants.build(variant, fn, compiled=True), limits.compiled_seconds)
    delta = {k: surge.counters[k] - before.get(k, 0) for k in ("fallbacks", "graph_breaks", "graphs")}
    surge.reset()
    record = Record(module_name, test_id, variant, "same", eager=eager, compiled=compiled, **delta)
    if compiled.verdict.kind == "timeout":
        record.status = "timeout"
        record.reason = f"over {limits.compiled_seconds} s compiled, {eager.seconds:.2f} s eagerly"
    elif compiled.key() != eager.key():
        again = run_once(cls, name, eager_body, limits.eager_seconds)
        record.status = "differs" if again.key() == eager.key() else "unstable"
    return record


def _class_fixture(cls, which: str) -> str | None:
    """Run setUpClass / tearDownClass; a skip or an error there is the reason returned."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            getattr(cls, which)()
            if which == "tearDownClass":
                cls.doClassCleanups()
    except unittest.SkipTest as e:
        return f"{which} skipped: {e}"
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        return f"{which} raised {type(e).__name__}: {e}"
    return None


def run_module(module_name: str, variant_names=variants.VARIANTS, limits: Limits | None = None,
               select=None, progress=None) -> list[Record]:
    """Every test method of ``test.<module_name>`` under every variant named."""
    limits = limits or Limits()
    module = importlib.import_module(f"test.{module_name}")
    records: list[Record] = []
    getattr(module, "setUpModule", lambda: None)()
    try:
        by_class: dict[type, list[str]] = {}
        for cls, name in iter_test_methods(module):
            if select is None or select(cls, name):
                by_class.setdefault(cls, []).append(name)
        for cls, names in by_class.items():
            problem = _class_fixture(cls, "setUpClass")
            for name in names:
                reason = problem or skips.skip_reason(module_name, cls, name)
                for variant in variant_names:
                    if reason:
                        record = Record(module_name, f"{cls.__name__}.{name}", variant, "skipped", reason)
                    else:
                        try:
                            record = compare_method(module_name, cls, name, variant, limits)
                        except Exception as e:  # noqa: BLE001 - a runner bug: reported per test
                            record = Record(module_name, f"{cls.__name__}.{name}", variant, "runner-error",
                                            f"{type(e).__name__}: {e}")
                    records.append(record)
                    if progress:
                        progress(record)
            if problem is None:
                _class_fixture(cls, "tearDownClass")
    finally:
        getattr(module, "tearDownModule", lambda: None)()
    return records


def totals(records: list[Record]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    counts["fallbacks"] = sum(r.fallbacks for r in records)
    counts["graph_breaks"] = sum(r.graph_breaks for r in records)
    counts["graphs"] = sum(r.graphs for r in records)
    return counts
