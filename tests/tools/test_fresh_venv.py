"""The README's first command on a fresh machine: a new venv, the command as the README
writes it, and the demo's own summary checked (graphs compiled, kernels made, no fallback).

It installs torch into the venv (a few minutes), so it runs only with
SURGE_TEST_FRESH_VENV=1 (docs/bench.md, "Checking the README on a fresh venv").
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.environ.get("SURGE_TEST_FRESH_VENV") != "1",
                                reason="installs torch into a new venv: set SURGE_TEST_FRESH_VENV=1")


def readme_demo_command() -> str:
    """The command under the README's "Two commands" heading that runs the demo."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in section.splitlines() if line.startswith("    ")]
    return next(c for c in commands if "python -m surge demo" in c)


def demo_summary(output: str) -> dict:
    match = re.search(r"^summary: graphs (\d+), graph breaks (\d+), kernels (\d+), fallbacks (\d+)$",
                      output, re.M)
    assert match, f"the demo printed no summary line:\n{output[-3000:]}"
    return dict(zip(("graphs", "graph_breaks", "kernels", "fallbacks"), map(int, match.groups())))


def test_readme_demo_command_in_a_fresh_venv(tmp_path):
    command = readme_demo_command()
    checkout = tmp_path / "surge"
    # The files a clone has (no caches, no build outputs, no egg-info an earlier install left).
    shutil.copytree(ROOT, checkout, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", ".pytest_cache", "build", "dist", ".surge_cache"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               SURGE_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(["bash", "-c", command], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=1800)
    output = proc.stdout + proc.stderr
    print(output[-6000:])  # pytest -s shows what the demo said
    assert proc.returncode == 0, output[-3000:]
    summary = demo_summary(proc.stdout)
    assert summary["graphs"] > 0 and summary["kernels"] > 0 and summary["fallbacks"] == 0, summary
    assert "all results match eager" in proc.stdout
    # The venv really is fresh: what only the test extra brings is not there.
    has_numpy = subprocess.run([str(venv / "bin" / "python"), "-c", "import numpy"], capture_output=True)
    assert has_numpy.returncode != 0
