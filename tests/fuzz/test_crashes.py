"""Programs that crash the interpreter under surge (tests/fuzz/crashes/), each run
in a child process: it must exit normally. Open ones carry ``XFAIL = "why"``."""
import os
import subprocess
import sys

import pytest

from tests.fuzz.test_fuzz_corpus import programs

CRASHES = os.path.join(os.path.dirname(__file__), "crashes")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("path", list(programs(CRASHES)))
def test_program_exits_normally(path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-X", "faulthandler", path], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr[-2000:]}"
