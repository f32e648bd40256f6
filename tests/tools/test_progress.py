import io
import time

from surge.observe import progress
from surge.observe.phases import CompileRecord


def test_long_compile_shows_its_phase_and_a_final_line(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.05)
    monkeypatch.setattr(progress, "REFRESH_S", 0.02)
    record = CompileRecord("gpt_forward", current_phase="autotune")
    stream = io.StringIO()
    ticker = progress.CompileProgress.start(record, stream=stream, force=True)
    time.sleep(0.2)
    ticker.stop()
    text = stream.getvalue()
    assert "compiling gpt_forward [autotune]" in text
    assert text.endswith("\n") and "compiled gpt_forward in" in text


def test_short_compile_prints_nothing(monkeypatch):
    stream = io.StringIO()
    ticker = progress.CompileProgress.start(CompileRecord("f"), stream=stream, force=True)
    ticker.stop()
    assert stream.getvalue() == "" and not ticker.shown


def test_not_a_terminal_means_no_thread_and_no_output(monkeypatch):
    monkeypatch.setattr(progress, "interactive", lambda: False)
    ticker = progress.CompileProgress.start(CompileRecord("f"))
    assert not isinstance(ticker, progress.CompileProgress)
    ticker.stop()


def test_surge_progress_0_turns_it_off_on_a_terminal_too(monkeypatch):
    from surge.observe.phases import PhaseTimer
    from surge.options import Options

    monkeypatch.setattr(progress, "interactive", lambda: True)
    monkeypatch.setenv("SURGE_PROGRESS", "0")
    assert Options.from_env().progress is False
    started = []
    real_start = progress.CompileProgress.start.__func__

    def start(cls, record, stream=None, force=False, enabled=True):
        ticker = real_start(cls, record, stream, force, enabled)
        started.append(isinstance(ticker, progress.CompileProgress))
        ticker.stop()
        return ticker
    monkeypatch.setattr(progress.CompileProgress, "start", classmethod(start))
    with PhaseTimer().compile("off by the environment"):
        pass
    with PhaseTimer().compile("on by the caller's options", progress=True):
        pass
    monkeypatch.delenv("SURGE_PROGRESS")
    assert Options.from_env().progress is True
    with PhaseTimer().compile("on by default"):
        pass
    assert started == [False, True, True]
