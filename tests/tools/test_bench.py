"""The bench end to end at --quick sizes on CPU: correctness of every workload, no timing asserts."""
import json

import pytest

from surge.__main__ import main
from surge.tools import bench, workloads
from surge.tools.bench_report import format_footer, format_table, table_rows


def quick_config(**changes):
    cfg = bench.BenchConfig(device="cpu", scale="quick", fresh_process_compile=False, overhead=False,
                            contenders=("eager", "surge"), budget_s=0.01)
    for k, v in changes.items():
        setattr(cfg, k, v)
    return cfg


def test_every_workload_under_surge_matches_eager():
    run = bench.run_bench(quick_config())
    assert [wr.name for wr in run["workloads"]] == workloads.names()
    for wr in run["workloads"]:
        r = wr.results["surge"]
        assert r.status == "ok", (wr.name, r.message)
        assert r.max_abs_error is not None and r.median_s > 0 and r.first_call_s > 0
        assert r.graphs is not None and r.graph_breaks is not None
        assert wr.speedup("surge") > 0
    by_name = {wr.name: wr.results["surge"] for wr in run["workloads"]}
    # Straight-line tensor code is one graph with no break.
    for name in ("seed_block_fp32", "softmax", "pointwise_chain_60"):
        assert (by_name[name].graphs, by_name[name].graph_breaks) == (1, 0), name


def test_cli_runs_all_contenders_and_writes_json(tmp_path, capsys):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    rc = main(["bench", "--quick", "--device", "cpu", "--only", "seed_block_fp32,layernorm_gelu",
               "--budget", "0.02", "--json", str(out_json), "--plot", str(out_png)])
    stdout = capsys.readouterr().out
    assert rc == 0, stdout
    for column in ("median", "speedup", "surge/tc", "1st call", "bandwidth", "g/b/k"):
        assert column in stdout
    assert "measured copy bandwidth" in stdout
    data = json.loads(out_json.read_text())
    env = data["environment"]
    assert env["device"] == "cpu" and env["scale"] == "quick" and "torch" in env["versions"]
    assert env["copy_bandwidth_Bps"] > 0
    assert [w["name"] for w in data["workloads"]] == ["seed_block_fp32", "layernorm_gelu"]
    for w in data["workloads"]:
        assert w["sizes"] and set(w["results"]) == {"eager", "torch.compile", "surge"}
        for contender in ("torch.compile", "surge"):
            assert w["results"][contender]["status"] == "ok"
            assert w["speedup_over_eager"][contender] > 0
        assert w["surge_over_torch_compile"] > 0
        # Both compilers' graphs and breaks are counted; straight-line code is one graph.
        for contender in ("torch.compile", "surge"):
            counted = w["results"][contender]
            assert (counted["graphs"], counted["graph_breaks"]) == (1, 0), (contender, counted)
        assert w["results"]["surge"]["fallbacks"] == 0
        assert isinstance(w["results"]["surge"]["compile_phases_s"], dict)
    assert data["workloads"][1]["results"]["surge"]["bandwidth_Bps"] > 0  # memory-bound workload
    if out_png.exists():
        assert out_png.read_bytes().startswith(b"\x89PNG")
    else:
        assert "matplotlib is not installed" in stdout


def test_fresh_process_compile_times_and_tiny_overhead():
    cfg = quick_config(fresh_process_compile=True, overhead=True)
    wr = bench.run_workload(cfg, "softmax")
    r = wr.results["surge"]
    assert r.status == "ok", r.message
    assert r.cold_compile_s > 0 and r.warm_compile_s > 0
    assert r.overhead_s is not None


def test_missing_backend_is_reported_not_a_crash(capsys):
    cfg = quick_config(surge_backend="no_such_backend", only=["softmax"])
    run = bench.run_bench(cfg)
    r = run["workloads"][0].results["surge"]
    assert r.status == "not available" and "no_such_backend" in r.message
    table = format_table(table_rows(run["workloads"][0], run["environment"]))
    assert "not available" in table


def test_unknown_workload_is_a_usage_error(capsys):
    assert main(["bench", "--quick", "--only", "no_such_workload"]) == 2
    assert "unknown workload" in capsys.readouterr().err


def test_wrong_results_fail_the_run(monkeypatch, capsys):
    # A contender that returns a wrong result must be flagged, and the CLI must exit non-zero.
    import surge.tools.contenders as contenders

    def off_by_one(name, backend):
        if name == "torch.compile":
            return contenders.Contender(name, lambda target: (lambda *args: target(*args) + 1))
        return contenders.eager_contender()

    monkeypatch.setattr(bench, "make_contender", off_by_one)
    rc = main(["bench", "--quick", "--device", "cpu", "--only", "softmax", "--budget", "0.01",
               "--contenders", "eager,torch.compile"])
    captured = capsys.readouterr()
    assert rc == 1 and "WRONG" in captured.out and "softmax/torch.compile" in captured.err


@pytest.mark.gpu
def test_quick_bench_on_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    run = bench.run_bench(quick_config(device="cuda", only=["seed_block_bf16", "rmsnorm_bf16"]))
    for wr in run["workloads"]:
        assert wr.results["surge"].status == "ok"
        assert wr.results["surge"].peak_memory_bytes is not None


def test_contenders_are_timed_in_interleaved_rounds():
    from surge.tools import timing

    calls = []
    steps = {name: (lambda name=name: calls.append(name)) for name in ("eager", "torch.compile", "surge")}
    medians = timing.interleaved_medians(steps, "cpu", warmup=1, min_reps=4, max_reps=4, budget_s=0.0)
    assert set(medians) == set(steps) and all(m >= 0 for m in medians.values())
    timed = calls[3:]                                   # after one warm-up call each
    rounds = [timed[k:k + 3] for k in range(0, len(timed), 3)]
    assert len(rounds) == 4 and all(sorted(r) == sorted(steps) for r in rounds)   # each once a round
    assert [r[0] for r in rounds] == ["eager", "torch.compile", "surge", "eager"]   # the first rotates


def test_a_contender_failing_while_timed_does_not_stop_the_others(monkeypatch):
    cfg = quick_config(contenders=("eager", "surge"))
    instance = workloads.build("softmax", "cpu", "quick")
    inputs = instance.make_inputs(0)
    real = bench.prepare_contender

    def flaky(cfg, instance, name, *args, **kwargs):
        result, step = real(cfg, instance, name, *args, **kwargs)
        if name == "surge":
            def step():
                raise RuntimeError("failed on a later call")
        return result, step
    monkeypatch.setattr(bench, "prepare_contender", flaky)
    results = bench.run_contenders(cfg, instance, None, inputs, inputs)
    assert results["eager"].status == "ok" and results["eager"].median_s > 0
    assert results["surge"].status == "error" and "later call" in results["surge"].message


def test_a_surge_row_that_compiled_nothing_is_not_ok(capsys):
    def broken_backend(gm, example_inputs):
        raise RuntimeError("this backend compiles nothing")

    run = bench.run_bench(quick_config(surge_backend=broken_backend, only=["softmax"]))
    wr = run["workloads"][0]
    r = wr.results["surge"]
    assert (r.graphs, r.fallbacks) == (0, 1) and r.ran_eagerly() == "0 graphs compiled"
    rows = table_rows(wr, run["environment"])
    assert rows[1][1] == "surge" and rows[1][-1].startswith("EAGER (")
    footer = format_footer(run["workloads"])
    assert "!! 1 rows ran (partly) eagerly" in footer and "softmax/surge: 0 graphs compiled" in footer
    assert "geometric mean speedup over eager, surge" not in footer   # an eager row is not a speedup


def test_a_noisy_speedup_is_marked():
    wr = bench.WorkloadResult("w", "", {}, "float32", False, None, {
        "eager": bench.ContenderResult(median_s=0.01),
        "surge": bench.ContenderResult(median_s=0.005, graphs=1, fallbacks=0, speedup_spread=3.0),
    })
    assert table_rows(wr, {})[1][3] == "2.00x?"
    assert "do not trust it" in format_footer([wr])


def test_graphs_from_the_disk_cache_count_as_compiled(tmp_path, monkeypatch):
    # A second process (here: after surge.reset()) takes the capture from disk: not "EAGER".
    monkeypatch.setenv("SURGE_FRONTEND_CACHE", "1")
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path))
    first = bench.run_workload(quick_config(), "softmax").results["surge"]
    second = bench.run_workload(quick_config(), "softmax").results["surge"]
    assert first.graphs == second.graphs == 1 and second.ran_eagerly() is None


def test_stored_peer_rows_are_reused_not_compiled(tmp_path, capsys, monkeypatch):
    first = tmp_path / "first.json"
    assert main(["bench", "--quick", "--device", "cpu", "--only", "softmax", "--budget", "0.01",
                 "--contenders", "eager,surge", "--json", str(first)]) == 0
    stored = json.loads(first.read_text())
    row = stored["workloads"][0]
    row["results"]["torch.compile"] = dict(row["results"]["surge"], graphs=1, graph_breaks=0)
    row["speedup_over_eager"]["torch.compile"] = 1.25
    first.write_text(json.dumps(stored))

    def no_torch_compile(name, *args, **kwargs):
        assert name != "torch.compile", "a stored torch.compile row was compiled again"
        return real_make(name, *args, **kwargs)
    real_make = bench.make_contender
    monkeypatch.setattr(bench, "make_contender", no_torch_compile)
    second = tmp_path / "second.json"
    capsys.readouterr()
    assert main(["bench", "--quick", "--device", "cpu", "--only", "softmax", "--budget", "0.01",
                 "--stored-peer", str(first), "--json", str(second)]) == 0
    out = capsys.readouterr().out
    assert "stored" in out
    w = json.loads(second.read_text())["workloads"][0]
    assert w["speedup_over_eager"]["torch.compile"] == 1.25
    assert w["results"]["torch.compile"]["message"].startswith("stored")
    assert w["surge_over_torch_compile"] == pytest.approx(w["speedup_over_eager"]["surge"] / 1.25)


def test_a_stored_run_from_another_environment_is_not_reused(tmp_path):
    from surge.tools.stored_peer import StoredPeer

    path = tmp_path / "other.json"
    path.write_text(json.dumps({"environment": {"device": "cuda", "device_name": "another card", "scale": "full",
                                                "versions": {"torch": "0"}},
                                "workloads": [{"name": "softmax", "sizes": {}, "dtype": "float32"}]}))
    peer = StoredPeer(str(path), {"device": "cpu", "device_name": "x", "scale": "quick", "versions": {}})
    assert peer.mismatch and peer.row("softmax", {}, "float32") is None


def test_the_overhead_suite_runs_the_cuda_graph_contenders():
    # on the CPU the reduce-overhead contender runs surge's default mode; the GPU run is the measurement
    cfg = quick_config(suite="overhead", only=["gelu_stack_16"], contenders=("eager", "surge:reduce-overhead"),
                       surge_backend="aot_eager")
    run = bench.run_bench(cfg)
    wr, = run["workloads"]
    assert wr.results["surge:reduce-overhead"].status == "ok", wr.results["surge:reduce-overhead"].message
    assert set(workloads.names("overhead")) == {"gelu_stack_16", "gpt2_b1_t8", "gpt2_decode_128",
                                                 "llama_decode_128"}


def test_stored_rows_come_from_several_files_of_this_environment(tmp_path):
    from surge.tools.stored_peer import StoredPeer

    here = {"device": "cpu", "device_name": "x", "scale": "quick", "versions": {}}
    ok = {"status": "ok"}
    files = []
    for k, (env, name) in enumerate([(here, "softmax"), (here, "layernorm"),
                                     (dict(here, device_name="another card"), "gelu")]):
        path = tmp_path / f"part{k}.json"
        path.write_text(json.dumps({"environment": env, "workloads": [
            {"name": name, "sizes": {}, "dtype": "float32", "results": {"torch.compile": ok},
             "speedup_over_eager": {"torch.compile": 1.5}}]}))
        files.append(str(path))
    peer = StoredPeer(",".join(files), here)
    assert peer.row("softmax", {}, "float32")["message"].endswith(f"({files[0]})")
    assert peer.row("layernorm", {}, "float32")["stored_speedup"] == 1.5
    assert peer.row("gelu", {}, "float32") is None and files[2] in peer.mismatch
