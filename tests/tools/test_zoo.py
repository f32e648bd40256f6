"""The models suite: what it lists, one tiny transformers model end to end, and rows for
models that cannot be built here."""
import sys

import pytest
import torch

from surge.tools import bench, workloads
from surge.tools.bench_report import format_table, table_rows


def zoo_config(**changes):
    cfg = bench.BenchConfig(device="cpu", scale="quick", suite="models", fresh_process_compile=False,
                            overhead=False, contenders=("eager", "surge"), budget_s=0.01)
    for k, v in changes.items():
        setattr(cfg, k, v)
    return cfg


def test_the_models_suite_lists_vision_and_transformers_models_in_both_modes():
    names = workloads.names("models")
    models = {name.rsplit(".", 1)[0] for name in names}
    assert {f"{m}.{mode}" for m in models for mode in ("infer", "train")} == set(names)
    vision = {m for m in models if m.split(".")[0] in ("timm", "tv")}
    text = {m for m in models if m.startswith("hf.")}
    assert len(vision) >= 20 and len(text) >= 10
    for expected in ("timm.resnet50", "tv.resnet18", "timm.vit_base_patch16_224", "timm.swin_tiny_patch4_window7_224",
                     "hf.gpt2", "hf.bert", "hf.t5", "hf.llama", "hf.whisper", "hf.clip_text"):
        assert expected in models
    # Inference of every model comes first: a run cut short by its time limit has them all.
    assert names.index(f"{sorted(models)[0]}.train") > max(names.index(f"{m}.infer") for m in models)
    assert not set(names) & set(workloads.names())   # the default suite is unchanged


def test_name_patterns_select_from_the_suite():
    infer = bench.selected_workloads(["hf.*.infer"], "models")
    assert infer and all(n.startswith("hf.") and n.endswith(".infer") for n in infer)
    with pytest.raises(ValueError, match="unknown workload"):
        bench.selected_workloads(["no_such.*"], "models")


def test_a_tiny_transformers_model_runs_end_to_end_under_surge():
    pytest.importorskip("transformers")
    wr = bench.run_workload(zoo_config(), "hf.clip_text.infer")
    eager, surge_result = wr.results["eager"], wr.results["surge"]
    assert eager.status == "ok" and eager.median_s > 0
    assert surge_result.status == "ok", surge_result.message
    assert surge_result.graphs >= 1 and surge_result.fallbacks == 0 and surge_result.kernels > 0
    assert surge_result.max_abs_error is not None and wr.speedup("surge") > 0
    assert wr.sizes["layers"] == 2 and wr.sizes["width"] == 64


def test_a_model_whose_library_is_missing_is_listed_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)   # as if timm were not installed
    wr = bench.run_workload(zoo_config(), "timm.resnet18.train")
    assert {r.status for r in wr.results.values()} == {"not available"}
    assert "timm is not importable" in wr.results["surge"].message
    [row] = table_rows(wr, {})
    assert row[:2] == ["timm.resnet18.train", "all"] and "timm is not importable" in format_table([row])


def test_workloads_past_the_time_limit_are_listed_as_not_run():
    run = bench.run_bench(zoo_config(only=["hf.bert.infer", "hf.gpt2.infer"], time_limit_s=0.0))
    for wr in run["workloads"]:
        assert {r.status for r in wr.results.values()} == {"not run"}
        assert "time limit" in wr.results["surge"].message


def test_autocast_training_runs_forward_and_loss_under_autocast():
    seen = []

    class Probe(torch.nn.Linear):
        def forward(self, x):
            out = super().forward(x)
            seen.append(out.dtype)
            return out

    torch.manual_seed(0)
    instance = workloads.Instance(Probe(8, 8), lambda seed: (torch.randn(4, 8),), sizes={}, dtype=torch.bfloat16,
                                  training=True, autocast=torch.bfloat16)
    target = instance.fresh_target()
    loss, *grads = instance.run(target, target, instance.make_inputs(0))
    assert seen == [torch.bfloat16] and all(g.dtype == torch.float32 for g in grads)
    reference = bench.float32_reference(instance, instance.make_inputs(0))
    assert seen[-1] == torch.float32 and reference[0].dtype == torch.float32   # judged without autocast


def test_judge_leaves_out_noise_on_a_near_zero_gradient_but_not_a_wrong_one():
    import torch
    from surge.tools.zoo_capture import judged

    big = torch.ones(100)
    tiny_ref = torch.full((8,), 1e-9)
    noisy = torch.full((8,), 1e-7)   # 100x off relatively, 1e-6 of the result's scale absolutely
    kept = judged([big, noisy], [big, tiny_ref * 1.5], [big, tiny_ref])
    assert len(kept[0]) == 1
    wrong = torch.full((8,), 1.0)    # off by the result's scale: still judged
    kept = judged([big, wrong], [big, tiny_ref * 1.5], [big, tiny_ref])
    assert len(kept[0]) == 2
