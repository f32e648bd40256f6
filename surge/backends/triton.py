"""The "triton" backend: ATen graphs to fused Triton kernels and a host wrapper.

``compile_aten_graph`` is the whole pipeline for one ATen graph
(lowering -> schedule -> Triton codegen -> load), with an on-disk cache of the
generated module. ``triton_backend`` is the torch.compile-protocol entry: the
aot layer turns the captured graph into ATen graphs (forward and backward) and
hands each to ``compile_aten_graph``.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time

import torch

from .. import fallbacks, logs
from ..counters import counters
from ..options import Options, default_cache_dir
from ..runtime.graph_cache import CacheSpec
from ..observe.debug_dir import write_current
from ..observe.phases import phase_timer

PERSISTENT_REDUCTION_LIMIT = 8192   # rows up to this many elements are reduced in one tile


@dataclasses.dataclass
class CompiledGraph:
    """A compiled ATen graph: call it with the graph's inputs."""
    call: object
    constants: list
    module: object
    source: str
    path: str
    launchers: dict = dataclasses.field(default_factory=dict)
    schedule: object = None       # None when the module came from the disk cache
    cache_hit: bool = False
    compile_seconds: float = 0.0
    autotune: bool = False

    def artifact(self) -> dict:
        """What the compiled-graph cache stores to rebuild this graph (``load_artifact``)."""
        return {"source": self.source, "path": self.path, "constants": list(self.constants),
                "autotune": self.autotune}

    def __call__(self, *args):
        return self.call_boxed(list(args))

    def call_boxed(self, args: list):
        """Run on ``args``, emptying the list: each input is dropped after its last use."""
        if self.constants:
            args.extend(self.constants)
        return self.call(args)

    @property
    def kernel_names(self) -> list:
        return list(self.module.KERNELS)


def _constants_of(gm: torch.fx.GraphModule) -> list:
    out = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if isinstance(value, torch.Tensor):
                out.append(value)
    return out


@phase_timer.compile("triton_graph")  # called alone (not under a frontend compile): a record of its own
def compile_aten_graph(aten_gm: torch.fx.GraphModule, example_inputs, options: Options | None = None, *,
                       persistent_limit: int = PERSISTENT_REDUCTION_LIMIT, autotune: bool = False):
    """Lower, schedule and generate code for one ATen graph; reuse the disk cache when it can.

    ``autotune``: time each kernel's candidate configs on its first call (on a GPU) and
    store the winner on disk; otherwise a stored winner or the default config is used.
    Returns a ``CompiledGraph``, or the graph's own ``forward`` when it cannot be
    compiled (logged on the ``fallbacks`` channel; raised with ``raise_internal_errors``).
    """
    from ..codegen.triton.module import generate_module, split_module
    from ..lowering.lower import lower_graph
    from ..runtime import code_cache
    from ..runtime.triton_mode import interpreting
    from ..schedule import schedule_graph

    start = time.perf_counter()
    options = options or Options.from_env()
    cache_dir = default_cache_dir(options)
    constants = _constants_of(aten_gm)
    key = code_cache.graph_key(aten_gm, example_inputs, constants,
                               (persistent_limit, interpreting(), options.split_reduction_min_elements,
                                options.pad_matmuls))
    stored = code_cache.read_module(cache_dir, "graphs", key)
    schedule, hit = None, stored is not None
    if hit:
        path, source = stored
    else:
        try:
            graph, _ = lower_graph(aten_gm, example_inputs, split_threshold=options.split_reduction_min_elements,
                                   pad_matmuls=options.pad_matmuls, options=options)
            write_current(options, "loop_ir.txt", graph.__str__)
            schedule = schedule_graph(graph, options)
            write_current(options, "schedule.txt", schedule.__str__)
            source, _ = generate_module(schedule, persistent_limit, options.compile_workers)
        except Exception as error:
            if options.raise_internal_errors:
                raise fallbacks.with_context(error, "the triton backend's lowering and codegen")
            # never fail the user's program: run this graph's ATen ops as they are
            fallbacks.announce(f"the triton backend could not compile it: {type(error).__name__}: {error}",
                               graph=True, options=options)
            return aten_gm.forward
        path = code_cache.write_module(cache_dir, "graphs", key, source)
    logs.log("output_code", f"{path}\n{source}")
    write_current(options, "kernels.py", lambda: split_module(source)[0])
    write_current(options, "wrapper.py", lambda: split_module(source)[1])
    compiled = _load(source, path, constants, cache_dir, autotune)
    compiled.schedule, compiled.cache_hit = schedule, hit
    compiled.compile_seconds = elapsed = time.perf_counter() - start
    logs.log("perf", f"compiled graph {key[:12]} in {elapsed * 1000:.1f} ms ({'disk cache' if hit else 'fresh'})")
    return compiled


def _load(source: str, path: str, constants: list, cache_dir: str, autotune: bool) -> CompiledGraph:
    """Import a generated module and bind a launcher to each of its kernels."""
    from ..runtime import code_cache
    from ..runtime.launcher import make_launcher

    with phase_timer.phase("kernel_compile"):  # loading; Triton compiles each kernel on its first launch
        module = code_cache.load_module(path, source)
        launchers = {name: make_launcher(getattr(module, name), name, meta, source, cache_dir, autotune)
                     for name, meta in module.KERNELS.items()}
    counters["kernels"] += len(launchers)
    return CompiledGraph(module.make_call(launchers), constants, module, source, path, launchers,
                         autotune=autotune)


def load_artifact(artifact: dict, cache_dir: str) -> CompiledGraph:
    """A compiled graph from its compiled-graph cache artifact. Triton finds each kernel's
    binary in its own cache on the first launch (it compiles only if that went missing)."""
    from ..runtime import code_cache

    key = os.path.basename(artifact["path"])[:-3]
    stored = code_cache.read_module(cache_dir, "graphs", key)
    if stored is not None and stored[1] == artifact["source"]:
        path = stored[0]
    else:  # Triton reads kernel source from the module's file
        path = code_cache.write_module(cache_dir, "graphs", key, artifact["source"])
    compiled = _load(artifact["source"], path, artifact["constants"], cache_dir, artifact["autotune"])
    compiled.cache_hit = True
    return compiled


def triton_backend(gm: torch.fx.GraphModule, example_inputs: list, *, options: Options | None = None):
    """torch.compile backend protocol: ``triton_backend(gm, example_inputs) -> callable``."""
    from ..aot import aot_compile

    options = options or Options.from_env()

    def compiler(aten_gm, inputs):
        from ..lowering.lower import graph_device
        from ..runtime.triton_mode import interpreting

        device = graph_device(inputs)   # a CPU scalar among CUDA inputs does not decide
        if device.type != "cuda" and not (device.type == "cpu" and interpreting()):
            # Kernels run on CUDA tensors, or on CPU tensors in Triton's interpreter
            # (TRITON_INTERPRET=1, which Triton reads when it is imported).
            fallbacks.announce(f"the triton backend runs {device.type} tensors only on CUDA"
                               + (" (or with TRITON_INTERPRET=1)" if device.type == "cpu" else ""),
                               graph=True, options=options)
            return aten_gm.forward
        return compile_aten_graph(aten_gm, inputs, options)

    cache = None
    if options.graph_cache and not options.debug_dir:  # a debug dir wants every layer's artifacts
        cache_dir = default_cache_dir(options)
        cache = CacheSpec(cache_dir, ("triton", PERSISTENT_REDUCTION_LIMIT, _kernel_target(example_inputs)),
                          functools.partial(load_artifact, cache_dir=cache_dir))
    return aot_compile(gm, example_inputs, fw_compiler=compiler, bw_compiler=compiler, options=options,
                       cache=cache, device_layouts=True)


def _kernel_target(example_inputs) -> str:
    """What the kernels run on: Triton's interpreter, or the GPU's name and compute capability."""
    from ..runtime.triton_mode import interpreting

    if interpreting():
        return "interpreter"
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor) and x.device.type == "cuda"),
                  None)
    if device is None:
        return "no gpu"
    return f"{torch.cuda.get_device_name(device)}|{torch.cuda.get_device_capability(device)}"


# Compile workers started when a capture begins in a process that uses the GPU.
EARLY_WORKERS = 8


def start_compile_workers_early(args: tuple) -> None:
    """A worker takes seconds to start (Triton imports torch there), longer than capture
    and lowering take: a capture of a call with CUDA tensors (or a module with CUDA
    parameters) starts a few now, so that they are ready when the graph's kernels are
    generated (more join then)."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized() and _uses_cuda(args)):
        return
    from ..runtime import compile_pool
    from ..runtime.triton_mode import interpreting

    if not interpreting():   # a capture hook gets no options: the environment's setting
        compile_pool.start_workers(EARLY_WORKERS * compile_pool.JOBS_PER_WORKER,
                                   Options.from_env().compile_workers)


def _uses_cuda(args: tuple) -> bool:
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_cuda:
            return True
        if isinstance(a, torch.nn.Module):
            first = next(a.parameters(), None)
            if first is not None and first.is_cuda:
                return True
    return False


triton_backend.before_capture = start_compile_workers_early


# Lowering takes static sizes only until SizeVars carries symbolic ones: the frontend
# compiles graphs for this backend static (frontend/dynamic_dims.py).
triton_backend.accepts_symbolic_sizes = False
