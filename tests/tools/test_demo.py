import pytest

import surge
from surge.tools import timing
from surge.tools.demo import run_demo, speed_line


def test_demo_checks_against_eager_and_shows_what_was_captured():
    lines = []
    assert run_demo(device="cpu", out=lines.append) == 0
    text = "\n".join(lines)
    for case in ("gelu(x @ w + b) + r", "bundled GPT model", "data-dependent branch"):
        assert case in text
    assert text.count("correct against eager on fresh inputs: yes") == 3
    assert "all results match eager" in text
    assert "--- captured graph 0 ---" in text and "--- guards of cache entry 0 ---" in text
    assert text.count("speed: eager") == 3 and "interleaved rounds" in text
    # Four graphs: the block, the GPT model, the branch's two halves; no frame ran eagerly.
    summary = next(line for line in lines if line.startswith("summary: "))
    assert summary.startswith("summary: graphs 4, graph breaks 1, kernels ") and summary.endswith("fallbacks 0")
    assert int(summary.split("kernels ")[1].split(",")[0]) > 0
    assert surge.counters["graph_breaks"] >= 1


def test_a_backend_that_compiles_nothing_fails_the_demo_loudly():
    def broken_backend(gm, example_inputs):
        raise RuntimeError("this backend compiles nothing")

    lines = []
    assert run_demo(device="cpu", backend=broken_backend, out=lines.append) == 3
    text = "\n".join(lines)
    assert "summary: graphs 0, graph breaks 0, kernels 0, fallbacks 3" in text
    assert "0 graphs compiled: every call ran eagerly" in text and "SURGE_LOGS=fallbacks" in text
    assert "all results match eager" not in text
    assert text.count("!! 0 graphs compiled") == 3   # each case says it ran eagerly


def fake_timer(seconds: dict):
    """A timer for ``interleaved_times`` that reads each step's next time from ``seconds``."""
    def timer(step):
        return seconds[step.__name__].pop(0)
    return timer


def named_steps(*names):
    steps = {}
    for name in names:
        step = lambda: None  # noqa: E731
        step.__name__ = name
        steps[name] = step
    return steps


def test_the_speed_line_is_the_ratio_of_interleaved_medians():
    # Eager is steady at 10 ms; surge at 2 ms except one disturbed round: the median ignores it.
    seconds = {"eager": [1.0] * 3 + [0.010] * 7, "surge": [1.0] * 3 + [0.002] * 6 + [0.5]}
    times = timing.interleaved_times(named_steps("eager", "surge"), "cpu", warmup=0, min_reps=10,
                                     max_reps=10, budget_s=0.0, timer=fake_timer(seconds))
    measured = timing.speedup(times["eager"][3:], times["surge"][3:])
    assert (measured.baseline_s, measured.candidate_s, measured.rounds) == (0.010, 0.002, 7)
    assert measured.ratio == pytest.approx(5.0) and measured.reliable
    assert speed_line(measured) == ("speed: eager 10000.0 us, surge 2000.0 us per call "
                                    "(medians of 7 interleaved rounds): 5.00x eager")


def test_a_speed_measured_on_a_busy_machine_gives_no_ratio():
    # The first rounds ran eager under load (the "1810x eager" case): the rounds disagree.
    eager = [1.8, 1.8, 1.8, 1.8, 0.001, 0.001, 0.001, 0.001]
    surge_times = [0.001] * 8
    measured = timing.speedup(eager, surge_times)
    assert not measured.reliable
    line = speed_line(measured)
    assert "no speed ratio given" in line and "x eager" not in line


def test_a_speedup_needs_times_from_the_same_rounds():
    with pytest.raises(ValueError, match="same interleaved rounds"):
        timing.speedup([0.1, 0.1], [0.1])
