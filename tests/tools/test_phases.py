import time

import pytest

from surge.observe.phases import PHASES, PhaseTimer, format_breakdown


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_nested_phases_are_charged_self_time_and_add_up_to_the_total():
    timer = PhaseTimer()
    with timer.compile("f"):
        with timer.phase("capture"):
            spin(0.02)
            with timer.phase("aot"):
                spin(0.03)
                with timer.phase("lowering"):
                    spin(0.01)
            spin(0.01)
        spin(0.005)
    (record,) = timer.records
    s = record.seconds
    # Each phase holds at least its own work; if nested time were also charged to
    # the outer phase, the phases would add up to more than the wall time.
    assert s["capture"] >= 0.03 and s["aot"] >= 0.03 and s["lowering"] >= 0.01 and s["other"] >= 0.005
    assert sum(s.values()) == pytest.approx(record.total, abs=0.002)


def test_phase_outside_a_compile_opens_its_own_record_and_nested_compiles_fold():
    timer = PhaseTimer()
    with timer.phase("codegen"):
        spin(0.005)
    with timer.compile("outer"):
        with timer.compile("inner"):
            with timer.phase("autotune"):
                spin(0.005)
    assert [r.name for r in timer.records] == ["compile_codegen", "outer"]
    assert timer.records[0].seconds["codegen"] > 0.004
    assert timer.records[1].seconds["autotune"] > 0.004
    summary = timer.summary()
    assert list(summary) == [p for p in PHASES if p in summary]  # pipeline order
    assert "codegen" in format_breakdown(summary) and "autotune" in format_breakdown(summary)


def test_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="unknown compile phase"):
        with PhaseTimer().phase("linking"):
            pass


def test_perf_channel_prints_each_finished_compile(monkeypatch, capsys):
    timer = PhaseTimer()
    monkeypatch.setenv("SURGE_LOGS", "perf")
    with timer.compile("my_graph"):
        with timer.phase("scheduling"):
            pass
    err = capsys.readouterr().err
    assert "[surge:perf] compile my_graph: total" in err and "scheduling=" in err
    monkeypatch.setenv("SURGE_LOGS", "graph")
    with timer.compile("quiet"):
        pass
    assert "quiet" not in capsys.readouterr().err
