"""bench/first_call.py's summary: raw and net (minus eager's first call) seconds and ratios, on made-up runs."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def first_call():
    spec = importlib.util.spec_from_file_location("first_call", ROOT / "bench" / "first_call.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(workload, contender, run, seconds):
    return {"workload": workload, "contender": contender, "run": run, "first_call_s": seconds}


# Two repeats each: the summary takes the fastest of them.
RESULTS = [
    run("mlp_train", "eager", "cold", 0.30), run("mlp_train", "eager", "cold", 0.25),
    run("mlp_train", "surge", "cold", 1.25), run("mlp_train", "surge", "warm", 0.41),
    run("mlp_train", "surge", "cold", 1.40), run("mlp_train", "surge", "warm", 0.50),
    run("mlp_train", "torch.compile", "cold", 10.25), run("mlp_train", "torch.compile", "warm", 3.63),
    run("mlp_train", "torch.compile", "cold", 11.0), run("mlp_train", "torch.compile", "warm", 3.70),
    # surge's warm call faster than eager's: its net is floored, not negative.
    run("softmax", "eager", "cold", 0.20),
    run("softmax", "surge", "cold", 0.70), run("softmax", "surge", "warm", 0.19),
    run("softmax", "torch.compile", "cold", 5.20), run("softmax", "torch.compile", "warm", 2.20),
]


def test_net_is_first_call_minus_eager_and_ratios_use_it(first_call):
    rows = {(r["workload"], r["contender"]): r for r in first_call.summary_rows(RESULTS)}
    assert set(rows) == {(w, c) for w in ("mlp_train", "softmax") for c in ("surge", "torch.compile")}
    surge, tc = rows["mlp_train", "surge"], rows["mlp_train", "torch.compile"]
    assert (surge["cold_s"], surge["warm_s"], surge["eager_s"]) == (1.25, 0.41, 0.25)
    assert surge["net_cold_s"] == pytest.approx(1.00) and surge["net_warm_s"] == pytest.approx(0.16)
    assert tc["net_cold_s"] == pytest.approx(10.00) and tc["net_warm_s"] == pytest.approx(3.38)
    assert surge["ratio_cold"] == pytest.approx(10.25 / 1.25)
    assert surge["ratio_warm"] == pytest.approx(3.63 / 0.41)
    assert surge["ratio_net_cold"] == pytest.approx(10.0)
    assert surge["ratio_net_warm"] == pytest.approx(3.38 / 0.16)
    assert "ratio_cold" not in tc

    floored = rows["softmax", "surge"]
    assert floored["net_warm_s"] == first_call.NET_FLOOR_S
    assert floored["ratio_net_warm"] == pytest.approx((2.20 - 0.20) / first_call.NET_FLOOR_S)
    json.dumps(first_call.summary_rows(RESULTS))   # the --json summary is plain data


def test_summary_text_shows_raw_and_net(first_call):
    lines = first_call.summary(RESULTS).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("workload "))
    assert "eager" in lines[header] and "net cold" in lines[header] and "net warm" in lines[header]
    body = lines[header + 1:]
    assert [line.split()[1] for line in body] == ["surge", "torch.compile"] * 2   # eager is a column, not a row
    mlp_surge = next(line for line in body if line.startswith("mlp_train") and " surge " in line)
    assert mlp_surge.split()[2:7] == ["1.250s", "0.410s", "0.250s", "1.000s", "0.160s"]
    assert mlp_surge.endswith("cold 1/8.2 (net 1/10), warm 1/8.9 (net 1/21)")
    softmax_surge = next(line for line in body if line.startswith("softmax") and " surge " in line)
    assert "<0.001s" in softmax_surge and "(net 1/2000)" in softmax_surge


def test_without_eager_only_raw_numbers(first_call):
    results = [r for r in RESULTS if r["contender"] != "eager"]
    row = next(r for r in first_call.summary_rows(results) if r["contender"] == "surge")
    assert row["eager_s"] is None and row["net_cold_s"] is None and row["ratio_net_cold"] is None
    text = first_call.summary(results)
    assert "cold 1/8.2, warm 1/8.9" in text and "net 1/" not in text


def test_eager_runs_by_default_only_when_ratios_are_printed(first_call):
    wants = first_call.wants_eager_baseline
    assert wants(["surge", "torch.compile"], None)
    assert not wants(["surge"], None) and not wants(["torch.compile"], None)
    assert not wants(["surge", "torch.compile"], False)
    assert wants(["surge"], True)
