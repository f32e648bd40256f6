"""mode="reduce-overhead": what the CUDA graph wrapper records, reads in place, copies,
hands out and refuses, driven through a recorder that replays on the CPU."""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

import surge
from surge import logs
from surge.backends import cudagraphs
from surge.backends.cudagraph_policy import mutated_inputs

from .cudagraph_fakes import FakeRecorder, executable_of, fake_backend, new_pool, stale_message


def _compiled(fn, max_records: int = 8):
    pool, made = new_pool(max_records), []
    return surge.compile(fn, backend=fake_backend(pool, made)), pool, made


def _block():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))


def test_warms_up_then_records_then_replays_reading_parameters_in_place():
    model = _block()
    compiled, pool, made = _compiled(model)
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(3, 8)
            torch.testing.assert_close(compiled(x), model(x))
    wrapper, = made
    recorded = wrapper.recorded
    params = {p.data_ptr() for p in model.parameters()}
    assert {ptr for _, ptr, _ in recorded.in_place} == params          # read where they are
    assert [k for k, _ in recorded.copies] == [0]                      # the input is copied in
    assert surge.counters["cudagraphs_recorded"] == 1 and surge.counters["cudagraphs_replayed"] == 3
    assert pool.recorder.replays == 3 and len(pool.recorder.pools) == 1


def test_parameter_updated_in_place_is_followed_and_a_reassigned_one_records_again(capfd, monkeypatch):
    monkeypatch.setenv("SURGE_LOGS", "cudagraphs")
    model = _block()
    compiled, pool, made = _compiled(model)
    x = torch.randn(3, 8)
    with torch.no_grad():
        compiled(x), compiled(x)
        model[0].weight.add_(1.0)                       # an optimizer step: same memory
        torch.testing.assert_close(compiled(x), model(x))
        assert surge.counters["cudagraphs_recorded"] == 1
        model[0].weight = torch.nn.Parameter(torch.randn(8, 8))   # new memory
        torch.testing.assert_close(compiled(x), model(x))
        torch.testing.assert_close(compiled(x), model(x))
    assert surge.counters["cudagraphs_recorded"] == 2
    assert "moved: recorded again" in capfd.readouterr().err


def test_an_output_overwritten_by_a_later_replay_is_invalidated_and_a_clone_is_kept():
    model = _block()
    compiled, _, _ = _compiled(model)
    with torch.no_grad():
        compiled(torch.randn(3, 8)), compiled(torch.randn(3, 8))     # warmup, record
        x1 = torch.randn(3, 8)
        first = compiled(x1)
        kept = first.clone()
        assert stale_message(first) is None
        second = compiled(torch.randn(3, 8))
    message = stale_message(first)
    assert message and "overwritten" in message and "clone" in message
    assert stale_message(second) is None
    with torch.no_grad():
        torch.testing.assert_close(kept, model(x1))
    surge.cudagraph_mark_step_begin()                 # a new iteration: everything handed out is stale
    assert stale_message(second) and "overwritten" in stale_message(second)


def _training_step_matches(compiled, model, reference):
    """One step of ``compiled`` (over ``model``) and of ``reference``: equal gradients."""
    x = torch.randn(3, 8)
    model.zero_grad(set_to_none=True)
    reference.zero_grad(set_to_none=True)
    compiled(x).square().sum().backward()
    reference(x).square().sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_training_records_forward_and_backward_in_one_pool_and_grads_stay_out_of_it():
    model = _block()
    reference = _block()
    compiled, pool, made = _compiled(model)
    for _ in range(4):
        _training_step_matches(compiled, model, reference)
    forward, backward = made
    assert forward.recorded is not None and backward.recorded is not None
    assert forward.recorded.saved and backward.recorded.sequence > forward.recorded.sequence
    # the backward reads the forward's saved tensors where the forward's replay wrote them, and
    # the parameters it needs where they are: only the incoming gradient is copied
    assert any(kind == cudagraphs.POOL for _, _, kind in backward.recorded.in_place)
    assert len(backward.recorded.copies) == 1
    assert len(pool.recorder.pools) == 1 and len(pool.recordings) == 2
    in_pool = pool.static_storages()
    assert all(p.grad.untyped_storage().data_ptr() not in in_pool for p in model.parameters())
    assert surge.counters["cudagraphs_replayed"] == 6      # calls 2-4 x (forward, backward)
    # cuBLAS's workspaces are freed around each warmup and recording, none kept of their own
    assert pool.recorder.released == ["warmup", "warmup", "record", "record"]


def test_a_forward_while_an_earlier_backward_is_pending_runs_without_the_graph():
    model = _block()
    reference = _block()
    compiled, _, _ = _compiled(model)
    for _ in range(2):
        compiled(torch.randn(3, 8)).sum().backward()
    model.zero_grad(set_to_none=True)
    x1, x2 = torch.randn(3, 8), torch.randn(3, 8)
    first = compiled(x1).square().sum()
    second = compiled(x2).square().sum()          # must not overwrite what first's backward reads
    (first + second).backward()
    ((reference(x1).square().sum()) + reference(x2).square().sum()).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_a_static_input_updated_in_place_is_recorded():
    def step(x, cache):
        cache.mul_(0.5).add_(x)        # a cache written in place, the same tensor every call
        return cache.sum(0) * 2

    cache, reference = torch.zeros(4, 4), torch.zeros(4, 4)
    compiled, _, made = _compiled(step)
    for _ in range(4):
        x = torch.randn(4, 4)
        torch.testing.assert_close(compiled(x, cache), step(x, reference))
    torch.testing.assert_close(cache, reference)
    assert made[0].recorded is not None and made[0].not_recorded is None


def test_an_input_updated_in_place_that_is_copied_is_not_recorded(capfd, monkeypatch):
    monkeypatch.setenv("SURGE_LOGS", "cudagraphs")

    def f(x, y):
        return y.add_(x).sum()

    compiled, _, made = _compiled(f)
    for _ in range(3):
        args = [torch.randn(6), torch.randn(6)]
        expected = [a.clone() for a in args]
        torch.testing.assert_close(compiled(*args), f(*expected))
        torch.testing.assert_close(args, expected)       # the user's tensor was updated
    assert made[-1].recorded is None and "updates input(s)" in made[-1].not_recorded
    assert capfd.readouterr().err.count("not recorded") == 1
    assert surge.counters["cudagraphs_recorded"] == 0


def test_an_op_that_synchronizes_with_the_host_is_not_recorded():
    def f(x):
        return torch.ops.aten.nonzero.default(x)

    wrapper = cudagraphs.CudaGraphed(executable_of(torch.fx.symbolic_trace(f)), new_pool())
    for _ in range(3):
        x = torch.randn(5)
        torch.testing.assert_close(wrapper(x), f(x))
    assert wrapper.recorded is None and "aten.nonzero.default" in wrapper.not_recorded


def test_tensors_on_another_device_than_the_recorders_are_not_recorded():
    class CudaOnly(FakeRecorder):
        device_type = "cuda"

    pool = cudagraphs.GraphPool(CudaOnly(), 8)
    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    wrapper = cudagraphs.CudaGraphed(executable_of(_aten(gm, torch.randn(3))), pool)
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(wrapper(x)[0], x * 2)
    assert "cpu" in wrapper.not_recorded


def _aten(gm, *inputs):
    from surge.aot import trace_aten

    return trace_aten(gm, list(inputs))


def test_distinct_sizes_record_up_to_the_bound_then_run_in_the_default_mode(capfd, monkeypatch):
    monkeypatch.setenv("SURGE_LOGS", "cudagraphs")

    def f(x):
        return (x * 3).sin()

    compiled, pool, made = _compiled(f, max_records=2)
    for n in (2, 3, 4):
        for _ in range(3):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), f(x))
    assert [w.recorded is not None for w in made] == [True, True, False]
    assert "cudagraph_max_records=2" in made[2].not_recorded
    assert len(pool.recorder.pools) == 1 and pool.records_made == 2
    assert capfd.readouterr().err.count("not recorded") == 1


def test_a_graph_of_symbolic_sizes_is_recorded_once_per_size_up_to_the_bound(capfd, monkeypatch):
    monkeypatch.setenv("SURGE_LOGS", "cudagraphs")

    def f(x):
        return (x * 3).sin() + x.shape[0]

    pool, made = new_pool(max_records=2), []
    compiled = surge.compile(f, backend=fake_backend(pool, made, symbolic=True), dynamic=True)
    for n in (2, 2, 2, 3, 3, 3, 2, 4, 4, 4, 3):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), f(x))
    wrapper, = made                  # one graph, for every size
    assert isinstance(wrapper, cudagraphs.RecordedPerSize)
    by_size = {next(k[0] for k in key if isinstance(k, tuple)): graphed for key, graphed in wrapper.per_size.items()}
    assert sorted(by_size) == [(2,), (3,), (4,)]
    assert by_size[(2,)].recorded is not None and by_size[(3,)].recorded is not None
    assert "cudagraph_max_records=2" in by_size[(4,)].not_recorded    # the pool's bound holds per size too
    # sizes 2 and 3: warmup, record + replay, replay; then one more replay each
    assert surge.counters["cudagraphs_recorded"] == 2 and surge.counters["cudagraphs_replayed"] == 6
    assert surge.counters["graphs"] == 1


def test_random_ops_draw_fresh_numbers_at_every_replay():
    compiled, _, made = _compiled(lambda x: F.dropout(x, 0.5, training=True))
    x = torch.ones(2000)
    outs = [compiled(x).clone() for _ in range(4)]
    assert made[0].recorded is not None
    assert not torch.equal(outs[2], outs[3])
    assert all(abs((o == 0).float().mean().item() - 0.5) < 0.05 for o in outs)


def test_mutated_inputs_are_read_from_the_launches():
    def f(x, c):
        c.add_(1)
        return x * 2

    gm = _aten(torch.fx.symbolic_trace(f), torch.randn(3), torch.zeros(3))
    assert mutated_inputs(executable_of(gm)) == {1}


def test_the_mode_on_cpu_tensors_runs_the_default_mode_with_one_info_line(caplog, monkeypatch):
    monkeypatch.setattr(logs, "_INFO_SEEN", set())

    def f(x):
        return torch.relu(x) + 1

    def g(x):
        return x.sin() * 2

    with caplog.at_level(logging.INFO, logger="surge"):
        for fn in (f, g):
            compiled = surge.compile(fn, mode="reduce-overhead")
            for _ in range(3):
                x = torch.randn(4)
                torch.testing.assert_close(compiled(x), fn(x))
    assert sum("default mode" in r.getMessage() for r in caplog.records) == 1
    assert surge.counters["cudagraphs_recorded"] == 0 and surge.counters["fallbacks"] == 0


def test_the_recording_sees_aten_calls_the_launch_table_does_not_show():
    def host_code(args):
        x, = args
        args.clear()
        return (x[torch.ops.aten.nonzero.default(x > 0)[:, 0]].sum(),)

    gm = torch.fx.symbolic_trace(lambda x: x * 1)
    quiet = executable_of(gm)
    quiet.call = host_code                   # its launches say nothing of the nonzero
    wrapper = cudagraphs.CudaGraphed(quiet, new_pool())
    for _ in range(3):
        x = torch.randn(6)
        torch.testing.assert_close(wrapper(x)[0], x[x > 0].sum())
    assert wrapper.recorded is None and "aten.nonzero.default" in wrapper.not_recorded


def test_a_reassigned_parameter_in_training_records_forward_and_backward_again():
    model, reference = _block(), _block()
    compiled, _, made = _compiled(model)
    for step in range(5):
        if step == 3:
            weight = torch.randn(8, 8)
            model[0].weight = torch.nn.Parameter(weight.clone())
            reference[0].weight = torch.nn.Parameter(weight.clone())
        _training_step_matches(compiled, model, reference)
    forward, backward = made
    assert len(forward.variants) == 2 and len(backward.variants) == 2
    assert surge.counters["cudagraphs_recorded"] == 4


def test_modules_sharing_compiled_graphs_replay_a_recording_each():
    first, second = _block(), _block()
    with torch.no_grad():
        for p in second.parameters():
            p.add_(1.0)
    pool, made = new_pool(), []
    backend = fake_backend(pool, made)
    compiled = [surge.compile(m, backend=backend) for m in (first, second)]
    with torch.no_grad():
        for _ in range(4):
            for c, m in zip(compiled, (first, second)):
                x = torch.randn(3, 8)
                torch.testing.assert_close(c(x), m(x))
    wrapper, = made                 # one compiled graph for both modules: a recording each
    assert len(wrapper.variants) == 2 and surge.counters["cudagraphs_recorded"] == 2
    assert wrapper.not_recorded is None


def test_expanded_and_strided_inputs_are_copied_as_the_memory_they_cover():
    def f(x, y):
        return (x * 2 + y).sum(0)

    compiled, _, made = _compiled(f)
    for _ in range(4):
        x = torch.randn(1, 8).expand(4, 8)            # stride 0: elements share memory
        y = torch.randn(8, 8)[::2]                    # gaps between rows
        torch.testing.assert_close(compiled(x, y), f(x, y))
    copies = made[0].recorded.copies
    assert len(copies) == 2 and all(static.span is not None for _, static in copies)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU, test_cudagraphs_gpu.py records real CUDA graphs")
def test_the_triton_backend_wraps_its_executables_in_the_mode(monkeypatch):
    # the Triton interpreter's CPU tensors stand in for CUDA ones, a CPU recorder for CUDA graphs
    pools = []

    def fake_pool(device, max_records):
        pools.append(new_pool(max_records))
        return pools[-1]

    monkeypatch.setattr(cudagraphs, "cuda_pool_for", fake_pool)

    def f(x, w):
        return torch.relu(x @ w) * 2

    compiled = surge.compile(f, backend="triton", mode="reduce-overhead")
    w = torch.randn(8, 8)
    for _ in range(4):
        x = torch.randn(4, 8)
        torch.testing.assert_close(compiled(x, w), f(x, w))
    assert len(pools) == 1 and surge.counters["cudagraphs_recorded"] == 1
    assert surge.counters["cudagraphs_replayed"] == 3
    surge.reset()                       # the same graph again, from the compiled-graph cache
    compiled = surge.compile(f, backend="triton", mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(4, 8)
        torch.testing.assert_close(compiled(x, w), f(x, w))
    assert surge.counters["graph_cache_hits"] >= 1 and surge.counters["cudagraphs_recorded"] == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU, test_cudagraphs_gpu.py records real CUDA graphs")
def test_the_triton_backend_records_a_graph_of_symbolic_sizes_per_size(monkeypatch):
    pools = []

    def fake_pool(device, max_records):
        pools.append(new_pool(max_records))
        return pools[-1]

    monkeypatch.setattr(cudagraphs, "cuda_pool_for", fake_pool)

    def f(x):
        return (x[:, :4] * 2).sum(1)    # the slice's end needs a guard (4 <= the width)

    compiled = surge.compile(f, backend="triton", mode="reduce-overhead", dynamic=True)
    for width in (6, 6, 6, 7, 7, 7, 6):
        x = torch.randn(3, width)
        torch.testing.assert_close(compiled(x), f(x))
    assert len(pools) == 1 and surge.counters["graphs"] == 1
    assert surge.counters["cudagraphs_recorded"] == 2 and surge.counters["cudagraphs_replayed"] == 5


def test_outputs_of_a_recording_that_is_freed_are_invalidated():
    import gc

    pool = new_pool()
    wrapper = cudagraphs.CudaGraphed(executable_of(_aten(torch.fx.symbolic_trace(lambda x: x * 2), torch.randn(3))),
                                     pool)
    for _ in range(3):
        out, = wrapper(torch.randn(3))
    assert stale_message(out) is None and len(pool.recordings) == 1
    del wrapper
    gc.collect()
    assert pool.recordings == [] and "freed" in stale_message(out)


def test_an_output_fed_back_as_the_next_input_is_read_before_it_is_overwritten():
    layers = [_block()[0] for _ in range(12)]          # one structure: one compiled graph
    pool, made = new_pool(max_records=2), []
    backend = fake_backend(pool, made)
    compiled = [surge.compile(layer, backend=backend) for layer in layers]
    with torch.no_grad():
        for _ in range(3):
            x = expected = torch.randn(3, 8)
            for c, layer in zip(compiled, layers):
                x, expected = c(x), layer(expected)        # x: the previous replay's output
            torch.testing.assert_close(x, expected)
    wrapper, = made
    assert len(wrapper.variants) == 12 and wrapper.not_recorded is None


def test_a_one_element_cpu_constant_may_be_read_other_cpu_tensors_may_not():
    import types

    from surge.backends.cudagraph_policy import RecordingWatch, why_not_recorded

    def executable(constants):
        return types.SimpleNamespace(constants=constants, launches=[], inputs=[])

    scale, table = torch.tensor(0.5), torch.zeros(3)
    assert why_not_recorded(executable([scale]), [], set(), "cuda") is None
    assert "cpu" in why_not_recorded(executable([table]), [], set(), "cuda")
    watch = RecordingWatch("meta", [scale])
    with watch:
        torch.ops.aten.mul.Tensor(torch.ones(2, device="meta"), scale)
    assert watch.problems == []
    with watch:
        torch.ops.aten.add.Tensor(table, 1)
    assert "aten.add.Tensor runs on cpu" in watch.problems[0]


def test_a_pool_whose_recordings_all_died_is_replaced_by_a_fresh_one():
    """Two modules of one class in turn (one forward code, one pool per code object): the
    first one's recordings die with it, and the second records into a new pool."""
    import gc

    pool, made = new_pool(), []
    backend = fake_backend(pool, made)
    with torch.no_grad():
        for _ in range(2):
            model = _block()
            compiled = surge.compile(model, backend=backend)
            for _ in range(3):
                x = torch.randn(3, 8)
                torch.testing.assert_close(compiled(x), model(x))
            del compiled, model
            made.clear()
            surge.reset()
            gc.collect()
    assert surge.counters["cudagraphs_recorded"] == 2 and surge.counters["cudagraphs_not_recorded"] == 0
    assert len(pool.recorder.pools) == 2
