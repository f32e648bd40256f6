"""Where a compiled training step's host time goes, on the CPU: per-call microseconds split
into the frontend's entry checks, the aot runtime, the generated host code and autograd.

On a GPU a small training step is host-bound: the device finishes each kernel before the
host has issued the next. To see that host time here, one model-zoo training workload
(default ``timm.resnet18.train`` with two images of ``--image 32``) is compiled with surge
(``--backend cpp``, or ``triton`` in Triton's interpreter, set here) and warmed up; then
every kernel becomes a no-op and every ATen call of the host code (its module-level
callees, ``codegen/extern_callees.py``) returns fresh tensors of the layouts it returned
when recorded, so a step runs all of the host code and none of the compute (on a CPU the
compute would also evict the host code's objects from the caches). Each step
``out = compiled(x); loss = loss_fn(out); loss.backward()`` is timed with timers around
the layers' own calls:

- ``entry``: the compiled module's call minus the aot layer's ``AotCompiled.__call__``
  (nn.Module dispatch, the guards, reading the graph's inputs);
- ``aot forward``: ``AotCompiled.__call__`` minus the forward graph's call (variant
  lookup, the aliasing check of mutated inputs, ``autograd.Function.apply``, the saved
  tensors' bookkeeping);
- ``forward graph`` / ``backward graph``: the generated host code's ``call(args)``
  (allocations, views, launches, ATen calls as replayed);
- ``aot backward``: ``CompiledFunction.backward`` minus the backward graph's call;
- ``autograd``: ``loss.backward()`` minus ``CompiledFunction.backward`` (the engine, the
  loss's own backward, gradient accumulation into ``.grad``).

Each figure is the median over ``--steps`` steps (the machine is shared; ``--min`` prints
minima); ``--real`` adds a column of steps with their kernels and ATen calls, ``--profile
ROWS`` a cProfile of host-only steps. ``--compiled-host-code`` (triton) runs the host code
that compiled GPU kernels get instead of the interpreter's (arena buffers as addresses).

    PYTHONPATH=.:<timm on cpu> python bench/train_step_host.py [--workload timm.resnet18.train]
        [--backend cpp|triton] [--image 32] [--steps 200] [--real] [--profile 40] [--compiled-host-code]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time

if "--backend" in sys.argv and sys.argv[sys.argv.index("--backend") + 1] == "triton":
    os.environ.setdefault("TRITON_INTERPRET", "1")   # read by Triton when it is imported

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import surge  # noqa: E402
from surge.aot import compile as aot_compile, runtime  # noqa: E402
from surge.backends import pipeline  # noqa: E402
from surge.backends.executable import Executable  # noqa: E402
from surge.tools import workloads  # noqa: E402


class Timers:
    """Seconds spent inside each wrapped call during the current step."""

    def __init__(self):
        self.spent: dict[str, float] = {}

    def wrap(self, name: str, fn):
        spent = self.spent

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

        return timed


def instrument(timers: Timers) -> list:
    """Timers around the aot layer's calls; returns the list the compiled graphs land in."""
    graphs: list[Executable] = []
    for maker in ("compile_graphs", "load_artifact"):
        original = getattr(pipeline, maker)

        def recorded(*a, _original=original, **k):
            out = _original(*a, **k)
            graphs.extend(g for g in (out if isinstance(out, list) else [out]) if isinstance(g, Executable))
            return out

        setattr(pipeline, maker, recorded)
    aot_compile.AotCompiled.__call__ = timers.wrap("aot_call", aot_compile.AotCompiled.__call__)
    runtime.CompiledFunction.backward = staticmethod(timers.wrap("aot_backward", runtime.CompiledFunction.backward))
    return graphs


def time_graphs(graphs: list, timers: Timers) -> None:
    """Each graph's call(args) under a timer of its own; it calls ``graph.own_call``, which
    is the generated call until the bench swaps it."""
    for k, graph in enumerate(graphs):
        graph.own_call = graph.call

        def timed(args, _graph=graph, _name=f"graph{k}"):
            start = time.perf_counter()
            try:
                return _graph.own_call(args)
            finally:
                timers.spent[_name] = timers.spent.get(_name, 0.0) + time.perf_counter() - start

        graph.call = timed


def compiled_host_module(graph: Executable, folder: str):
    """The graph's Triton module generated again as for compiled (GPU) kernels, which take
    the arena's kernel-only buffers as addresses, and loaded (its kernels never run)."""
    import dataclasses
    import hashlib

    from surge.backends.triton import target_for
    from surge.codegen.triton.module import generate_module
    from surge.options import CompileConfig
    from surge.runtime import code_cache

    if graph.schedule is None:
        raise SystemExit("--compiled-host-code needs graphs compiled in this process (not from a cache)")
    target = dataclasses.replace(target_for(torch.device("cpu")), interpreted=False)
    source, _ = generate_module(graph.schedule, target, CompileConfig())
    key = hashlib.sha256(source.encode()).hexdigest()[:24]
    return code_cache.load_module(code_cache.write_module(folder, "graphs", key, source), source)


def no_op_call(graph: Executable, module=None):
    """The graph's host code (of ``module``, default its own) with every kernel a no-op
    (Triton launchers or C++ segments)."""
    if graph.target == "triton":
        module = module or graph.module
        return module.make_call({name: (lambda *args: None) for name in module.KERNELS})
    import ctypes

    address = ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value

    class Library:   # every segment a C function that returns at once
        def __getattr__(self, name):
            return ctypes.CFUNCTYPE(None)(address)

    return graph.module.make_call(Library())


class ExternReplay:
    """The host code's ATen calls answered from a recording: each call returns fresh
    tensors of the layouts the real call returned (an allocation, as the op's own), so a
    step runs the host code with no compute. The callees are the module-level names the
    host code calls them by (``aten_*``, ``linear``)."""

    def __init__(self):
        self.recording = True

    def install(self, module) -> None:
        for name, fn in list(vars(module).items()):
            if callable(fn) and (name.startswith("aten_") or name == "linear"):
                setattr(module, name, self.stand_in(fn))

    def stand_in(self, fn):
        recorded, position = [], [0]

        def call(*args, **kwargs):
            if self.recording:
                recorded.append(fn(*args, **kwargs))
                return recorded[-1]
            position[0] += 1   # the calls of one step, in the order they were recorded
            return _fresh_like(recorded[(position[0] - 1) % len(recorded)])

        return call


def _fresh_like(result):
    if isinstance(result, torch.Tensor):
        return torch.empty_strided(result.shape, result.stride(), dtype=result.dtype, device=result.device)
    if isinstance(result, (tuple, list)):
        return type(result)(_fresh_like(r) for r in result)
    return result


def median_us(values: list, use_min: bool) -> float:
    return (min(values) if use_min else statistics.median(values)) * 1e6


def run_steps(compiled, inputs, loss_fn, params, timers: Timers, names: dict, steps: int) -> dict:
    rows: dict[str, list] = {}
    for _ in range(steps):
        for q in params:
            q.grad = None
        timers.spent.clear()
        start = time.perf_counter()
        out = compiled(*inputs)
        forward = time.perf_counter() - start
        loss = loss_fn(out, inputs)
        start = time.perf_counter()
        loss.backward()
        backward = time.perf_counter() - start
        s = timers.spent
        graph_time = {names[k]: v for k, v in s.items() if k in names}
        fw, bw = graph_time.get("forward graph", 0.0), graph_time.get("backward graph", 0.0)
        split = {"entry": forward - s["aot_call"], "aot forward": s["aot_call"] - fw, "forward graph": fw,
                 "autograd": backward - s["aot_backward"], "aot backward": s["aot_backward"] - bw,
                 "backward graph": bw, "step (forward + backward)": forward + backward}
        for key, value in split.items():
            rows.setdefault(key, []).append(value)
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="timm.resnet18.train")
    p.add_argument("--backend", default="cpp", choices=("cpp", "triton"))
    p.add_argument("--scale", default="quick", choices=workloads.SCALES)
    p.add_argument("--image", type=int, default=32, help="image side of a vision model's input (0: the scale's)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--real", action="store_true", help="also time steps with their kernels and ATen calls")
    p.add_argument("--compiled-host-code", action="store_true",
                   help="triton: run the host code generated for compiled kernels (arena addresses)")
    p.add_argument("--min", action="store_true", help="minima instead of medians")
    p.add_argument("--profile", type=int, default=0, metavar="ROWS",
                   help="then a cProfile of host-only steps, this many rows by own time")
    args = p.parse_args()
    torch.set_num_threads(1)
    inst = workloads.build(args.workload, "cpu", args.scale)
    assert inst.training, f"{args.workload} is no training workload"
    timers = Timers()
    graphs = instrument(timers)
    model = inst.fresh_target()
    cache = tempfile.mkdtemp(prefix="train_step_host_")   # compiled here: each graph has its schedule
    compiled = surge.compile(model, backend=args.backend, options={"cache_dir": cache})
    params = [p for p in model.parameters() if p.requires_grad]
    inputs = inst.make_inputs(0)
    if args.image and inst.sizes.get("image"):
        inputs = (torch.randn(inputs[0].shape[0], 3, args.image, args.image),)
    loss_fn = inst.loss_fn or (lambda out, _inputs: out.float().square().mean())
    for _ in range(3):
        for q in params:
            q.grad = None
        loss_fn(compiled(*inputs), inputs).backward()
    time_graphs(graphs, timers)
    names = {f"graph{k}": "backward graph" if g.saved_outputs_from is None else "forward graph"
             for k, g in enumerate(graphs)}
    statistic = "min" if args.min else "median"
    tables = {}
    if args.real:
        tables["with kernels and ATen calls"] = run_steps(compiled, inputs, loss_fn, params, timers, names, args.steps)
    replay = ExternReplay()
    for graph in graphs:
        module = compiled_host_module(graph, cache) if args.compiled_host_code else graph.module
        replay.install(module)
        graph.own_call = no_op_call(graph, module)
    run_steps(compiled, inputs, loss_fn, params, timers, names, 1)   # records the ATen calls
    replay.recording = False
    tables["host only: no-op kernels, ATen calls replayed"] = run_steps(
        compiled, inputs, loss_fn, params, timers, names, args.steps)
    host = ", host code for compiled kernels" if args.compiled_host_code else ""
    print(f"{args.workload} ({args.scale}, image {args.image or 'as the scale'}, {args.backend} backend{host}), "
          f"us per step, {statistic} of {args.steps} steps:")
    header = list(tables)
    print(f"  {'':28s} " + "  ".join(f"{h:>30s}" for h in header))
    for key in tables[header[-1]]:
        print(f"  {key:28s} " + "  ".join(f"{median_us(tables[h][key], args.min):30.1f}" for h in header))
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run_steps(compiled, inputs, loss_fn, params, timers, names, args.steps)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
