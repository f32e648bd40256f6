"""SURGE_LOGS is parsed once per value it takes, and a change between calls is seen."""
from surge import logs


def test_surge_logs_is_parsed_once_per_value(monkeypatch):
    parsed = []
    real_parse = logs._parse

    def counting_parse(raw):
        parsed.append(raw)
        return real_parse(raw)
    monkeypatch.setattr(logs, "_parse", counting_parse)
    monkeypatch.setenv("SURGE_LOGS", "graph,-fallbacks")
    for _ in range(100):
        assert logs.enabled("graph") and not logs.enabled("aot") and logs.removed("fallbacks")
    assert parsed == ["graph,-fallbacks"]
    monkeypatch.setenv("SURGE_LOGS", "all,-graph")
    assert not logs.enabled("graph") and logs.enabled("aot") and not logs.removed("fallbacks")
    assert parsed == ["graph,-fallbacks", "all,-graph"]
    monkeypatch.delenv("SURGE_LOGS")
    assert not logs.enabled("aot")
