"""Every program the fuzzer found a difference in, minimised (tests/fuzz/corpus/),
run compiled and eagerly by the fuzzer's checker. A program surge still gets
wrong carries ``XFAIL = "why"`` and is a strict xfail: it turns green when fixed."""
import ast
import os

import pytest

from tests.fuzz import checker

CORPUS = os.path.join(os.path.dirname(__file__), "corpus")


def _xfail_reason(path: str) -> str | None:
    with open(path) as f:
        tree = ast.parse(f.read())
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["XFAIL"]:
            return ast.literal_eval(stmt.value)
    return None


def programs(folder: str):
    """A pytest param per program of ``folder``, a strict xfail where it says ``XFAIL``."""
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            path = os.path.join(folder, name)
            reason = _xfail_reason(path)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(path, id=name[:-3], marks=marks)


@pytest.mark.parametrize("path", list(programs(CORPUS)))
def test_corpus_program_matches_eager(path):
    difference = checker.check_file(path)
    assert difference is None, str(difference)
