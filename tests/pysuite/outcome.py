"""What one run of a unittest test method produced, in a form two runs can be compared by.

An outcome is the test's verdict (pass, fail, error, skip, expected failure,
unexpected success, timeout), the type of the exception behind a fail or an
error, the same for every subTest, and what the test printed. Messages and
tracebacks are kept for the report but never compared: they name surge's
generated code where eager names the test's own.
"""
from __future__ import annotations

import dataclasses
import unittest


class TestTimeout(BaseException):
    """Raised into a test that runs past its time limit (a BaseException, so that the
    test's own ``except Exception`` does not swallow it)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    kind: str                 # pass / fail / error / skip / xfail / xpass / timeout
    exc_type: str = ""        # the exception class of a fail or an error
    detail: str = ""          # first lines of the message: for the report only

    def key(self) -> tuple[str, str]:
        return (self.kind, self.exc_type)


@dataclasses.dataclass
class Outcome:
    verdict: Verdict = Verdict("pass")
    subtests: list[tuple[str, Verdict]] = dataclasses.field(default_factory=list)
    stdout: str = ""
    seconds: float = 0.0
    # Names in builtins the run left rebound (restored by the runner afterwards).
    builtins_changed: tuple[str, ...] = ()

    def key(self):
        return (self.verdict.key(), tuple((d, v.key()) for d, v in self.subtests), self.stdout,
                self.builtins_changed)

    def summary(self) -> str:
        text = self.verdict.kind + (f" {self.verdict.exc_type}" if self.verdict.exc_type else "")
        if self.builtins_changed:
            text += f" (left builtins changed: {', '.join(self.builtins_changed)})"
        bad = [(d, v) for d, v in self.subtests if v.kind != "pass"]
        if bad:
            text += f" (subtests: {len(bad)} not passing, first {bad[0][0]}: {bad[0][1].kind} {bad[0][1].exc_type})"
        return text

    def details(self) -> str:
        lines = [self.verdict.detail] if self.verdict.detail else []
        lines += [f"{d}: {v.detail}" for d, v in self.subtests if v.detail]
        return "\n".join(lines)


def _verdict(kind: str, err) -> Verdict:
    exc_type, exc, _ = err
    if exc_type is TestTimeout:
        return Verdict("timeout")
    message = str(exc).strip().splitlines()
    return Verdict(kind, exc_type.__name__, message[0][:200] if message else "")


class RecordingResult(unittest.TestResult):
    """A TestResult that keeps the verdict of one test and of its subTests."""

    def __init__(self):
        super().__init__()
        self.outcome = Outcome()
        self._main: Verdict | None = None

    def _set(self, verdict: Verdict) -> None:
        # A test that failed and then errored in tearDown reports both; the first is kept.
        if self._main is None:
            self._main = verdict

    def addError(self, test, err):
        self._set(_verdict("error", err))

    def addFailure(self, test, err):
        self._set(_verdict("fail", err))

    def addSkip(self, test, reason):
        self._set(Verdict("skip", detail=reason[:200]))

    def addExpectedFailure(self, test, err):
        self._set(Verdict("xfail"))

    def addUnexpectedSuccess(self, test):
        self._set(Verdict("xpass"))

    def addSubTest(self, test, subtest, err):
        if err is None:
            verdict = Verdict("pass")
        elif issubclass(err[0], test.failureException):
            verdict = _verdict("fail", err)
        else:
            verdict = _verdict("error", err)
        self.outcome.subtests.append((subtest._subDescription(), verdict))

    def finish(self) -> Outcome:
        if self._main is not None:
            self.outcome.verdict = self._main
        elif any(v.kind in ("fail", "error", "timeout") for _, v in self.outcome.subtests):
            self.outcome.verdict = Verdict("fail-in-subtest")
        return self.outcome
