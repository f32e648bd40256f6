"""mode="reduce-overhead" on a CUDA device: real CUDA graphs against eager."""
import copy

import pytest
import torch
import torch.nn.functional as F

import surge
from surge.backends import cudagraphs
from surge.tools import workloads
from surge.tools.bench import compare, compare_low_precision, float32_reference

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)


def _graphed(target):
    return surge.compile(target, mode="reduce-overhead")


def _recorded_and_replayed(recorded: int, replayed: int | None = None):
    assert surge.counters["cudagraphs_recorded"] == recorded, dict(surge.counters)
    assert surge.counters["cudagraphs_replayed"] >= (replayed or recorded), dict(surge.counters)
    assert surge.counters["cudagraphs_not_recorded"] == 0


@pytest.mark.parametrize("name", ["gpt_block", "mlp_train", "gpt_bundled", "llama_bundled", "gelu_stack_16",
                                  "gpt2_decode_128", "llama_decode_128"])
def test_bench_workloads_in_reduce_overhead_match_eager(name):
    instance = workloads.build(name, "cuda", "quick")
    eager_target, target = instance.fresh_target(), instance.fresh_target()
    target.load_state_dict(eager_target.state_dict())
    compiled = _graphed(target)
    for seed in range(4):   # warmup, record, two replays on fresh inputs
        inputs = instance.make_inputs(seed)
        actual = instance.run(compiled, target, inputs)
        actual = [t.clone() for t in actual] if isinstance(actual, list) else actual.clone()
        expected = instance.run(eager_target, eager_target, inputs)
        if instance.dtype in (torch.bfloat16, torch.float16):
            ok, err = compare_low_precision(actual, expected, float32_reference(instance, inputs))
        else:
            ok, err = compare(actual, expected, 1e-2, 1e-2)
        assert ok, (name, seed, err)
    _recorded_and_replayed(2 if instance.training else 1)


def test_dropout_under_graphs_draws_fresh_masks_with_its_distribution():
    compiled = _graphed(lambda x: F.dropout(x, 0.3, training=True))
    x = torch.ones(1 << 20, device="cuda")
    outs = [compiled(x).clone() for _ in range(5)]
    _recorded_and_replayed(1)
    for out in outs:
        kept = out != 0
        assert abs(kept.float().mean().item() - 0.7) < 0.01
        torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / 0.7))
    assert not torch.equal(outs[2], outs[3]) and not torch.equal(outs[3], outs[4])


def test_dropout_with_fallback_random_is_eagers_under_graphs():
    def f(x):
        return F.dropout(x, 0.5, training=True) * 2

    compiled = surge.compile(f, mode="reduce-overhead", options={"fallback_random": True})
    x = torch.randn(4096, device="cuda")
    for _ in range(3):
        torch.manual_seed(11)
        got = compiled(x).clone()
        torch.manual_seed(11)
        assert torch.equal(got, f(x))


def test_an_optimizer_updating_parameters_in_place_between_replays_is_followed():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).cuda()
    reference = copy.deepcopy(model)
    compiled = _graphed(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(5):
        x = torch.randn(16, 64, device="cuda")
        for m, o in ((compiled, opt), (reference, opt_ref)):
            o.zero_grad(set_to_none=False)     # .grad kept and accumulated into in place
            m(x).square().mean().backward()
            o.step()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)
    _recorded_and_replayed(2, replayed=2 * 4)   # steps 2-5 replay forward and backward


def test_a_reassigned_parameter_records_again():
    model = torch.nn.Linear(32, 32).cuda()
    compiled = _graphed(model)
    x = torch.randn(4, 32, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
        model.weight = torch.nn.Parameter(torch.randn(32, 32, device="cuda"))
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
    assert surge.counters["cudagraphs_recorded"] == 2


def test_two_shapes_are_two_recordings_in_one_pool():
    def f(x):
        return torch.relu(x @ x.T).sum(0) + 1

    compiled = surge.compile(f, mode="reduce-overhead", dynamic=False)
    for n in (8, 16, 8, 16, 8, 16):
        x = torch.randn(n, 32, device="cuda")
        torch.testing.assert_close(compiled(x), f(x), atol=1e-4, rtol=1e-4)
    assert surge.counters["cudagraphs_recorded"] == 2
    pool, = cudagraphs._POOLS[f.__code__].values()     # one pool for the function's graphs
    assert pool.records_made == 2 and len(pool.recordings) == 2


def test_a_graph_of_symbolic_sizes_is_recorded_per_size():
    instance = workloads.build("gpt_bundled", "cuda", "quick")
    eager_target, target = instance.fresh_target(), instance.fresh_target()
    target.load_state_dict(eager_target.state_dict())
    compiled = surge.compile(target, mode="reduce-overhead", dynamic=True)
    vocab = instance.sizes["vocab"]
    with torch.no_grad():
        for t in (5, 9, 5, 9, 5, 9, 7):
            idx = torch.randint(0, vocab, (2, t), device="cuda")
            torch.testing.assert_close(compiled(idx).float(), eager_target(idx).float(), atol=5e-2, rtol=5e-2)
    assert surge.counters["graphs"] == 1 and surge.counters["static_fallbacks"] == 0
    assert surge.counters["cudagraphs_recorded"] == 2       # lengths 5 and 9; 7 has only warmed up
    assert surge.counters["cudagraphs_replayed"] == 4


def test_reading_an_output_a_later_replay_overwrote_raises_and_a_clone_survives():
    compiled = _graphed(lambda x: x.sin() * 2)
    for _ in range(2):
        compiled(torch.randn(64, device="cuda"))
    x = torch.randn(64, device="cuda")
    first = compiled(x)
    kept = first.clone()
    view = first[:8]
    compiled(torch.randn(64, device="cuda"))
    with pytest.raises(RuntimeError, match="overwritten.*clone"):
        print(first + 1)
    if hasattr(torch._C, "_set_storage_data_ptr_access_error_msg"):   # views raise too
        with pytest.raises(RuntimeError, match="overwritten"):
            view.sum()
    torch.testing.assert_close(kept, x.sin() * 2)
    second = compiled(x)
    surge.cudagraph_mark_step_begin()
    with pytest.raises(RuntimeError, match="overwritten"):
        second.sum()


def test_a_backward_pending_across_a_second_forward_gets_the_right_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).cuda()
    reference = copy.deepcopy(model)
    compiled = _graphed(model)
    for _ in range(3):
        compiled(torch.randn(8, 32, device="cuda")).sum().backward()
    model.zero_grad(set_to_none=True)
    x1, x2 = torch.randn(8, 32, device="cuda"), torch.randn(8, 32, device="cuda")
    loss = compiled(x1).sum().clone() + compiled(x2).sum().clone()
    loss.backward()
    (reference(x1).sum() + reference(x2).sum()).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)


def test_a_cpu_tensor_among_the_inputs_is_not_recorded(capfd, monkeypatch):
    monkeypatch.setenv("SURGE_LOGS", "cudagraphs")

    def f(x, scale):
        return x * scale + 1

    compiled = _graphed(f)
    for k in range(3):
        x, scale = torch.randn(16, device="cuda"), torch.tensor(float(k + 2))
        torch.testing.assert_close(compiled(x, scale), f(x, scale))
    assert surge.counters["cudagraphs_recorded"] == 0
    assert "not recorded" in capfd.readouterr().err


def test_training_pool_memory_is_the_default_modes_and_no_more_than_torch_compiles():
    # Each contender starts without cuBLAS workspaces (32 MB per handle and stream, kept
    # for the process by whoever ran a matmul first): else the one measured second finds
    # them made and looks free.
    import gc

    instance = workloads.build("mlp_train", "cuda", "quick")
    compilers = {"surge reduce-overhead": lambda t: surge.compile(t, mode="reduce-overhead"),
                 "surge default": lambda t: surge.compile(t),
                 "torch.compile reduce-overhead": lambda t: torch.compile(t, mode="reduce-overhead")}
    peaks = {}
    for name, make in compilers.items():
        surge.reset()
        torch.compiler.reset()
        gc.collect()
        torch._C._cuda_clearCublasWorkspaces()
        torch.cuda.empty_cache()
        target = instance.fresh_target()
        inputs = [instance.make_inputs(seed) for seed in range(5)]
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        compiled = make(target)
        for step_inputs in inputs:        # warmup, recording and replays: the pool counts
            instance.run(compiled, target, step_inputs)
        torch.cuda.synchronize()
        peaks[name] = torch.cuda.max_memory_allocated() - base
        del compiled, target
    print(f"peak memory of five training steps: {peaks}")
    assert peaks["surge reduce-overhead"] <= 1.2 * peaks["surge default"] + (1 << 20), peaks
    assert peaks["surge reduce-overhead"] <= 1.1 * peaks["torch.compile reduce-overhead"] + (1 << 20), peaks
