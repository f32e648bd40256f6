"""The "cpp" backend: ATen graphs to fused C++/OpenMP kernels, built with the system compiler.

``compile_aten_graph_cpp`` is the whole pipeline for one ATen graph: lowering
and scheduling (shared with the Triton backend), C++ generation, the compiler,
and ctypes. Two disk caches make a second process fast: the generated host
module per graph (no lowering, scheduling or codegen) and the compiled library
per C++ source (no compiler run). ``cpp_backend`` is the torch.compile-protocol
entry; with no working C++ compiler it warns once and falls back to "aot_eager".

The compiler is ``Options.cxx`` (``$SURGE_CXX``, default ``g++``).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
import warnings

import torch

from .. import fallbacks, logs
from ..counters import counters
from ..errors import SurgeError
from ..options import Options, default_cache_dir
from ..runtime.graph_cache import CacheSpec
from ..observe.debug_dir import write_current
from ..observe.phases import phase_timer


class CompilerUnavailable(SurgeError):
    """No working C++ compiler: the cpp backend cannot build kernels here."""


@dataclasses.dataclass
class CompiledCppGraph:
    """A compiled ATen graph: call it with the graph's inputs."""
    call: object
    constants: list
    module: object               # the generated host module (holds CPP_SOURCE)
    source: str                  # the host module's text
    path: str
    schedule: object = None      # None when the module came from the disk cache
    cache_hit: bool = False      # the host module came from the disk cache
    compiled: bool = False       # the C++ compiler ran for this graph
    compile_seconds: float = 0.0
    library_source: str = ""     # the whole C++ library this graph's kernels are in

    def artifact(self) -> dict:
        """What the compiled-graph cache stores to rebuild this graph (``load_artifact``)."""
        return {"host_source": self.source, "path": self.path, "constants": list(self.constants),
                "library_source": self.library_source}

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

    @property
    def cpp_source(self) -> str:
        return self.module.CPP_SOURCE


def _constants_of(gm: torch.fx.GraphModule) -> list:
    return [getattr(gm, n.target) for n in gm.graph.nodes
            if n.op == "get_attr" and isinstance(getattr(gm, n.target), torch.Tensor)]


def _toolchain(cxx: str | None, cache_dir: str):
    from ..runtime.cpp_build import DEFAULT_CXX, find_toolchain

    toolchain = find_toolchain(cxx, cache_dir)
    if toolchain is None:
        raise CompilerUnavailable(f"no working C++ compiler {cxx or DEFAULT_CXX!r} (set SURGE_CXX to one)")
    return toolchain


def compile_aten_graph_cpp(aten_gm: torch.fx.GraphModule, example_inputs, options: Options | None = None, *,
                           cxx: str | None = None) -> CompiledCppGraph:
    """Lower, schedule, generate C++ for and build one ATen graph; reuse the disk caches."""
    return compile_aten_graphs_cpp([(aten_gm, example_inputs)], options, cxx=cxx)[0]


@phase_timer.compile("cpp_graph")  # called alone (not under a frontend compile): a record of its own
def compile_aten_graphs_cpp(graphs, options: Options | None = None, *, cxx: str | None = None) -> list:
    """Several ``(aten_gm, example_inputs)`` into one library: one compiler run for all of them."""
    from ..codegen.cpp.prelude import PRELUDE
    from ..runtime.cpp_build import load_library

    start = time.perf_counter()
    options = options or Options.from_env()
    cache_dir = default_cache_dir(options)
    toolchain = _toolchain(cxx, cache_dir)
    prepared = [_host_module(gm, inputs, options, cache_dir, toolchain, f"g{k}_" if len(graphs) > 1 else "")
                for k, (gm, inputs) in enumerate(graphs)]
    library = PRELUDE + "\n".join(p["module"].CPP_SOURCE for p in prepared)
    with phase_timer.phase("kernel_compile"):
        lib, compiled = load_library(library, toolchain, cache_dir)
    counters["kernels"] += sum(len(p["module"].KERNELS) for p in prepared)
    elapsed = time.perf_counter() - start
    logs.log("perf", f"cpp: {len(graphs)} graph(s) in {elapsed * 1000:.1f} ms "
                     f"({'compiled' if compiled else 'cached library'})")
    return [CompiledCppGraph(p["module"].make_call(lib), p["constants"], p["module"], p["source"], p["path"],
                             p["schedule"], p["hit"], compiled, elapsed, library) for p in prepared]


def load_artifact(artifact: dict, toolchain, cache_dir: str) -> CompiledCppGraph:
    """A compiled graph from its compiled-graph cache artifact: the host module from its
    text, the library from the library cache (built again only if it went missing)."""
    from ..runtime import code_cache
    from ..runtime.cpp_build import load_library

    key = os.path.basename(artifact["path"])[:-3]
    stored = code_cache.read_module(cache_dir, "cpp_graphs", key)
    if stored is not None and stored[1] == artifact["host_source"]:
        path = stored[0]
    else:
        path = code_cache.write_module(cache_dir, "cpp_graphs", key, artifact["host_source"])
    module = code_cache.load_module(path, artifact["host_source"])
    with phase_timer.phase("kernel_compile"):
        lib, compiled = load_library(artifact["library_source"], toolchain, cache_dir)
    counters["kernels"] += len(module.KERNELS)
    return CompiledCppGraph(module.make_call(lib), artifact["constants"], module, artifact["host_source"], path,
                            cache_hit=True, compiled=compiled, library_source=artifact["library_source"])


def _host_module(aten_gm, example_inputs, options: Options, cache_dir: str, toolchain, prefix: str) -> dict:
    """The graph's generated host module: from the disk cache, or lowered, scheduled and generated.

    A cache hit imports nothing of lowering, scheduling or code generation."""
    from ..runtime import code_cache

    constants = _constants_of(aten_gm)
    key = code_cache.graph_key(aten_gm, example_inputs, constants,
                               ("cpp", prefix, toolchain.version, toolchain.cpu, toolchain.vector_math,
                                options.split_reduction_min_elements, options.pad_matmuls))
    stored = code_cache.read_module(cache_dir, "cpp_graphs", key)
    schedule, hit = None, stored is not None
    if hit:
        path, source = stored
    else:
        from ..codegen.cpp.host import generate_host_module
        from ..codegen.cpp.module import generate_cpp_module
        from ..lowering.lower import lower_graph
        from ..schedule import schedule_graph

        graph, _ = lower_graph(aten_gm, example_inputs, split_threshold=options.split_reduction_min_elements,
                               pad_matmuls=options.pad_matmuls, options=options)
        if graph.device.type != "cpu":
            raise SurgeError(f"the cpp backend runs CPU tensors, this graph's are on {graph.device}")
        write_current(options, "loop_ir.txt", graph.__str__)
        shared = schedule_graph(graph, options)
        with phase_timer.phase("codegen"):
            cpp_module = generate_cpp_module(shared, prefix)
            source = generate_host_module(shared, cpp_module)
        schedule = cpp_module.schedule  # the shared one, refined for CPUs (column sums in row kernels)
        write_current(options, "schedule.txt", schedule.__str__)
        path = code_cache.write_module(cache_dir, "cpp_graphs", key, source)
    if logs.enabled("output_code"):
        logs.log("output_code", f"{path}\n{source}")
    module = code_cache.load_module(path, source)
    write_current(options, "kernels.cpp", lambda: module.CPP_SOURCE)
    write_current(options, "wrapper.py", source)
    return dict(module=module, source=source, path=path, schedule=schedule, hit=hit, constants=constants)


_WARNED: set = set()


def cpp_backend(gm: torch.fx.GraphModule, example_inputs: list, *, options: Options | None = None):
    """torch.compile backend protocol: ``cpp_backend(gm, example_inputs) -> callable``."""
    from ..aot import aot_compile
    from ..aot.backend import aot_eager_backend

    options = options or Options.from_env()
    cxx = options.cxx
    cache_dir = default_cache_dir(options)
    try:
        toolchain = _toolchain(cxx, cache_dir)
    except CompilerUnavailable as why:
        if cxx not in _WARNED:
            _WARNED.add(cxx)
            warnings.warn(f"surge: {why}; the cpp backend falls back to 'aot_eager' (no generated kernels)",
                          RuntimeWarning, stacklevel=2)
        fallbacks.announce(f"cpp backend: {why}", graph=True, outcome="runs on 'aot_eager' (no generated kernels)",
                           counted=False, warn=False)  # warned above, once per compiler
        return aot_eager_backend(gm, example_inputs, options=options)

    def compiler(aten_gm, inputs):
        return compile_aten_graph_cpp(aten_gm, inputs, options, cxx=cxx)

    cache = None
    if options.graph_cache and not options.debug_dir:  # a debug dir wants every layer's artifacts
        cache = CacheSpec(cache_dir, ("cpp", toolchain.version, toolchain.cpu, toolchain.flags, toolchain.libs),
                          functools.partial(load_artifact, toolchain=toolchain, cache_dir=cache_dir))
    return aot_compile(gm, example_inputs, fw_compiler=compiler, bw_compiler=compiler, options=options,
                       cache=cache, device_layouts=True)


# Lowering takes static sizes only until SizeVars carries symbolic ones: the frontend
# compiles graphs for this backend static (frontend/dynamic_dims.py).
cpp_backend.accepts_symbolic_sizes = False
