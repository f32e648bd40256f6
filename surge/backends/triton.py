"""The "triton" backend: ATen graphs to fused Triton kernels and a host wrapper.

The Triton target of the one pipeline (``pipeline.py``): its writers (the Triton kernel
writer and the host wrapper in one module) and its loader (bind a launcher to each
kernel; kernels compile in the compile workers, started here around codegen).
``triton_backend`` is the torch.compile-protocol entry: the aot layer turns the captured
graph into ATen graphs (forward and backward) and the pipeline compiles each.
"""
from __future__ import annotations

import functools

import torch

from .. import fallbacks
from ..counters import counters
from ..observe.phases import phase_timer
from ..options import CompileConfig, Options
from ..target import Target, triton_target
from . import cudagraphs, pipeline
from .executable import Executable
from .graph_cache import CacheSpec
from .specialize import compile_symbolic, has_symbolic_inputs


def _generate(schedule, target: Target, config: CompileConfig, prefix: str) -> str:
    from ..codegen.triton.module import generate_module, kernel_file
    from ..runtime import compile_pool

    source, kernels = generate_module(schedule, target, config)
    if target.compiles_kernels:
        # kernels compile when the module is loaded: start the workers now
        compile_pool.start_workers(len({kernel_file(k)[0] for k in kernels.values()}), config.compile_workers)
    return source


def _debug_files(source: str) -> dict:
    from ..codegen.triton.module import split_module

    kernels, wrapper = split_module(source)
    return {"kernels.py": kernels, "wrapper.py": wrapper}


def _load(modules: list, target: Target, config: CompileConfig, library_source) -> list:
    """Import each generated module and bind a launcher to each of its kernels."""
    from ..runtime import code_cache
    from ..runtime.launcher import make_launcher

    out = []
    with phase_timer.phase("kernel_compile"):  # loading; Triton compiles each kernel on its first launch
        for m in modules:
            module = code_cache.load_module(m.path, m.source)
            launchers = {name: make_launcher(getattr(module, name), name, meta, m.source, config.cache_dir,
                                             config.autotune)
                         for name, meta in module.KERNELS.items()}
            counters["kernels"] += len(launchers)
            out.append(Executable(module.make_call(launchers), list(m.constants), module, m.source, m.path,
                                  target.name, launchers=launchers, warmer=_binder(launchers)))
    return out


def _binder(launchers: dict):
    """``Executable.warmup`` of a Triton graph: every launcher binds its kernel (config, grid,
    and on a GPU the binary and its direct launch: queued compiles are finished first), so
    the first call neither compiles nor binds."""
    def bind_all() -> None:
        for launcher in launchers.values():
            launcher.bind()
    return bind_all


pipeline.register_target("triton", pipeline.TargetWriters("graphs", _generate, _load, _debug_files))


@functools.lru_cache(maxsize=None)
def _gpu_knobs(device: torch.device) -> tuple:
    return (torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device))


def target_for(device: torch.device) -> Target:
    """The Triton target for kernels on ``device`` tensors: interpreted when Triton runs in
    its interpreter (``TRITON_INTERPRET=1``, read by Triton when it is imported); on meta
    tensors (stand-ins for CUDA ones), code that is generated and compiled elsewhere."""
    from ..runtime.triton_mode import interpreting

    interpreted = interpreting()
    if device.type == "cuda" and not interpreted:
        return triton_target("cuda", False, _gpu_knobs(device))
    return triton_target(device.type, interpreted, ("interpreter",) if interpreted else ())


def _unsupported(device: torch.device) -> str | None:
    """Why kernels cannot run on ``device`` tensors here, or None: they run on CUDA tensors,
    or on CPU tensors in Triton's interpreter."""
    from ..runtime.triton_mode import interpreting

    if device.type == "cuda" or (device.type == "cpu" and interpreting()):
        return None
    return (f"the triton backend runs {device.type} tensors only on CUDA"
            + (" (or with TRITON_INTERPRET=1)" if device.type == "cpu" else ""))


def compile_aten_graph(aten_gm: torch.fx.GraphModule, example_inputs, options: Options | None = None):
    """One ATen graph through the pipeline with the Triton target of its device.

    Returns an ``Executable``, or the graph's own ``forward`` when it cannot be compiled
    (logged on the ``fallbacks`` channel; raised with ``raise_internal_errors``)."""
    from ..lowering.lower import graph_device

    config = CompileConfig.from_options(options or Options.from_env())
    device = graph_device(example_inputs)   # a CPU scalar among CUDA inputs does not decide
    return pipeline.compile(aten_gm, example_inputs, target_for(device), config)


def triton_backend(gm: torch.fx.GraphModule, example_inputs: list, *, options: Options | None = None):
    """torch.compile backend protocol: ``triton_backend(gm, example_inputs) -> callable``."""
    if has_symbolic_inputs(gm, example_inputs):   # one graph for every size (or per sizes)
        return compile_symbolic(gm, example_inputs, functools.partial(_compile, options=options),
                                functools.partial(triton_backend, options=options))
    return _compile(gm, example_inputs, options=options)


def _compile(gm: torch.fx.GraphModule, example_inputs: list, *, options: Options | None = None):
    from ..aot import aot_compile
    from ..lowering.lower import graph_device

    options = options or Options.from_env()
    config = CompileConfig.from_options(options)

    device = graph_device(example_inputs)
    pool = []   # the compiled function's CUDA graph pool, found when a graph is first wrapped

    def pool_of():
        if not pool:
            pool.append(cudagraphs.cuda_pool_for(device, config.cudagraph_max_records))
        return pool[0]

    def compiler(aten_gm, inputs):
        device = graph_device(inputs)   # a CPU scalar among CUDA inputs does not decide
        why = _unsupported(device)
        if why is not None:
            fallbacks.announce(why, graph=True, options=config)
            return aten_gm.forward
        return cudagraphs.for_mode(pipeline.compile(aten_gm, inputs, target_for(device), config), config,
                                   device, pool_of)

    def load(artifact):
        return cudagraphs.for_mode(pipeline.load_artifact(artifact, target=target, config=config), config,
                                   device, pool_of)

    cache = None
    target = target_for(device)
    if config.graph_cache and not config.debug_dir:  # a debug dir wants every layer's artifacts
        cache = CacheSpec(config.cache_dir, config.cache_key(target), load)
    return aot_compile(gm, example_inputs, fw_compiler=compiler, bw_compiler=compiler, options=options,
                       cache=cache, device_layouts=True)


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

    if not interpreting():
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


# Lowering takes symbolic sizes (SizeVars): the frontend hands graphs with symbolic
# sizes to this backend (frontend/dynamic_dims.py).
triton_backend.accepts_symbolic_sizes = True
# Changing numbers arrive as 0-d tensors (frontend/number_tensors.py): lowering takes
# symbolic sizes, not symbolic scalars.
triton_backend.accepts_symbolic_numbers = False
# Sizes with no hint (computed from data: nonzero, boolean masks) are not lowered.
triton_backend.accepts_data_dependent_sizes = False
