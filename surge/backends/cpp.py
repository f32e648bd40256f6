"""The "cpp" backend: ATen graphs to fused C++/OpenMP kernels, built with the system compiler.

The C++ target of the one pipeline (``pipeline.py``): its writers (C++ kernels and
segments, and the Python host code holding them, in one module) and its loader (the
modules of one compile are one library: one compiler run, cached by its source, loaded
with ctypes). ``cpp_backend`` is the torch.compile-protocol entry; with no working C++
compiler it warns once and falls back to "aot_eager".

The compiler is the ``cxx`` option (``SURGE_CXX``, default ``g++``).
"""
from __future__ import annotations

import functools
import warnings

import torch

from .. import fallbacks
from ..counters import counters
from ..errors import SurgeError
from ..observe.phases import phase_timer
from ..options import CompileConfig, Options
from ..target import Target, cpp_target
from . import pipeline
from .executable import Executable
from .graph_cache import CacheSpec
from .specialize import compile_symbolic, has_symbolic_inputs


class CompilerUnavailable(SurgeError):
    """No working C++ compiler: the cpp backend cannot build kernels here."""


@functools.lru_cache(maxsize=None)   # a missing compiler raises, and is looked for again next time
def _toolchain(cxx: str | None, cache_dir: str):
    from ..runtime.cpp_build import DEFAULT_CXX, find_toolchain

    toolchain = find_toolchain(cxx, cache_dir)
    if toolchain is None:
        raise CompilerUnavailable(f"no working C++ compiler {cxx or DEFAULT_CXX!r} (set SURGE_CXX to one)")
    return toolchain


def target_for(config: CompileConfig) -> Target:
    """The C++ target of the configured compiler: its version, the CPU and the flags are
    what built code depends on besides its source."""
    toolchain = _toolchain(config.cxx, config.cache_dir)
    return cpp_target((toolchain.version, toolchain.cpu, toolchain.vector_math, toolchain.flags, toolchain.libs))


def _generate(schedule, target: Target, config: CompileConfig, prefix: str) -> str:
    from ..codegen.cpp.host import generate_host_module
    from ..codegen.cpp.module import generate_cpp_module

    with phase_timer.phase("codegen"):
        return generate_host_module(schedule, generate_cpp_module(schedule, prefix))


def _debug_files(source: str) -> dict:
    from ..runtime import code_cache

    return {"kernels.cpp": lambda: code_cache.load_module("debug.py", source).CPP_SOURCE, "wrapper.py": source}


def _load(modules: list, target: Target, config: CompileConfig, library_source) -> list:
    """Import the host modules and build their kernels as one library (from the library
    cache when it holds it)."""
    from ..runtime import code_cache
    from ..runtime.cpp_build import load_library

    loaded = [code_cache.load_module(m.path, m.source) for m in modules]
    library = library_source
    if library is None:   # a fresh compile (an artifact names its library: no codegen imported)
        from ..codegen.cpp.prelude import PRELUDE
        library = PRELUDE + "\n".join(module.CPP_SOURCE for module in loaded)
    with phase_timer.phase("kernel_compile"):
        lib, compiled = load_library(library, _toolchain(config.cxx, config.cache_dir), config.cache_dir)
    counters["kernels"] += sum(len(module.KERNELS) for module in loaded)
    return [Executable(module.make_call(lib), list(m.constants), module, m.source, m.path, target.name,
                       library_source=library, compiled=compiled)
            for m, module in zip(modules, loaded)]


pipeline.register_target("cpp", pipeline.TargetWriters("cpp_graphs", _generate, _load, _debug_files))


def compile_aten_graph_cpp(aten_gm: torch.fx.GraphModule, example_inputs, options: Options | None = None, *,
                           cxx: str | None = None):
    """One ATen graph through the pipeline with the C++ target."""
    return compile_aten_graphs_cpp([(aten_gm, example_inputs)], options, cxx=cxx)[0]


def compile_aten_graphs_cpp(graphs, options: Options | None = None, *, cxx: str | None = None) -> list:
    """Several ``(aten_gm, example_inputs)`` into one library: one compiler run for all of them."""
    options = options or Options.from_env()
    if cxx is not None:
        options = options.replace(cxx=cxx)
    config = CompileConfig.from_options(options)
    return pipeline.compile_graphs(list(graphs), target_for(config), config)


_WARNED: set = set()


def cpp_backend(gm: torch.fx.GraphModule, example_inputs: list, *, options: Options | None = None):
    """torch.compile backend protocol: ``cpp_backend(gm, example_inputs) -> callable``."""
    if has_symbolic_inputs(gm, example_inputs):   # one graph for every size (or per sizes)
        return compile_symbolic(gm, example_inputs, functools.partial(_compile, options=options),
                                functools.partial(cpp_backend, options=options))
    return _compile(gm, example_inputs, options=options)


def _compile(gm: torch.fx.GraphModule, example_inputs: list, *, options: Options | None = None):
    from ..aot import aot_compile
    from ..aot.backend import aot_eager_backend

    options = options or Options.from_env()
    config = CompileConfig.from_options(options)
    if config.cudagraphs:
        from .cudagraphs import note_not_cuda

        note_not_cuda(torch.device("cpu"))
    try:
        target = target_for(config)
    except CompilerUnavailable as why:
        if config.cxx not in _WARNED:
            _WARNED.add(config.cxx)
            warnings.warn(f"surge: {why}; the cpp backend falls back to 'aot_eager' (no generated kernels)",
                          RuntimeWarning, stacklevel=2)
        fallbacks.announce(f"cpp backend: {why}", graph=True, outcome="runs on 'aot_eager' (no generated kernels)",
                           counted=False, warn=False)  # warned above, once per compiler
        return aot_eager_backend(gm, example_inputs, options=options)

    def compiler(aten_gm, inputs):
        return pipeline.compile(aten_gm, inputs, target, config)

    cache = None
    if config.graph_cache and not config.debug_dir:  # a debug dir wants every layer's artifacts
        cache = CacheSpec(config.cache_dir, config.cache_key(target),
                          functools.partial(pipeline.load_artifact, target=target, config=config))
    return aot_compile(gm, example_inputs, fw_compiler=compiler, bw_compiler=compiler, options=options,
                       cache=cache, device_layouts=True)


# Lowering takes symbolic sizes (SizeVars): the frontend hands graphs with symbolic
# sizes to this backend (frontend/dynamic_dims.py).
cpp_backend.accepts_symbolic_sizes = True
# Changing numbers arrive as 0-d tensors (frontend/number_tensors.py): lowering takes
# symbolic sizes, not symbolic scalars.
cpp_backend.accepts_symbolic_numbers = False
# Sizes with no hint (computed from data: nonzero, boolean masks) are not lowered.
cpp_backend.accepts_data_dependent_sizes = False
