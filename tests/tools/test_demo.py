import surge
from surge.tools.demo import run_demo


def test_demo_checks_against_eager_and_shows_what_was_captured():
    lines = []
    assert run_demo(device="cpu", out=lines.append) == 0
    text = "\n".join(lines)
    for case in ("gelu(x @ w + b) + r", "bundled GPT model", "data-dependent branch"):
        assert case in text
    assert text.count("correct against eager on fresh inputs: yes") == 3
    assert "all results match eager" in text
    assert "--- captured graph 0 ---" in text and "--- guards of cache entry 0 ---" in text
    assert "speed: eager" in text
    # The branch on a tensor value is a graph break (or, before graph breaks exist, a fallback).
    assert surge.counters["graph_breaks"] + surge.counters["fallbacks"] >= 1
