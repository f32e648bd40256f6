"""The one compile pipeline of the code-generating backends: ATen graphs -> ``Executable``s.

``compile_graphs([(aten_gm, example_inputs), ...], target, config)`` runs, for every target:

    code cache lookup (key: the graph, its inputs, ``config.cache_key(target)``)
      miss: lowering (``lower_graph``) -> scheduling (``schedule_graph``, refined for the
            target: column sums in row kernels where ``target.fuses_column_sums``)
            -> the target's kernel and host writers -> the module text, stored
    the target's loader: build (C++: one library for all the graphs) and bind
    -> one ``Executable`` per graph

What differs per target is the ``Target`` (data: ``surge/target.py``) and a
``TargetWriters`` (code: how it writes a module from a schedule, and how it builds and
loads modules), registered by the target's backend module. One failure policy holds for
all: an internal failure while compiling a graph raises with ``raise_internal_errors``,
else it is announced once (``fallbacks``) and the graph runs its ATen ops as they are.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable

import torch

from .. import fallbacks, logs
from ..observe.debug_dir import write_current
from ..observe.phases import phase_timer
from ..options import CompileConfig
from ..target import Target
from .executable import Executable

# ``gm.meta`` key that steers lowering (``lowering/lower.py``): part of the code-cache key.
TRACED_LAYOUT_OUTPUTS_FROM = "traced_layout_outputs_from"


@dataclasses.dataclass
class GeneratedModule:
    """One graph's module text, before it is built and loaded."""
    source: str
    path: str
    constants: list
    schedule: object = None      # None when the text came from the code cache
    cache_hit: bool = False


@dataclasses.dataclass(frozen=True)
class TargetWriters:
    """What is code, not data, per target."""
    # the code cache's folder of this target's modules
    module_folder: str
    # (schedule, target, config, name prefix) -> the module's text (kernel writer + host writer)
    generate: Callable
    # (modules, target, config, library_source or None) -> [Executable]: build and bind
    load: Callable
    # (source) -> {debug-dir file name: text} of a module's parts
    debug_files: Callable


_WRITERS: dict[str, TargetWriters] = {}


def register_target(name: str, writers: TargetWriters) -> None:
    _WRITERS[name] = writers


def constants_of(gm: torch.fx.GraphModule) -> list:
    """The tensors the graph reads by ``get_attr``: passed after its inputs."""
    return [getattr(gm, n.target) for n in gm.graph.nodes
            if n.op == "get_attr" and isinstance(getattr(gm, n.target), torch.Tensor)]


def code_key(gm: torch.fx.GraphModule, example_inputs, target: Target, config: CompileConfig,
             prefix: str = "") -> str:
    """The code-cache key of one graph's module."""
    from ..lowering.lower import graph_device
    from ..runtime import code_cache

    return code_cache.graph_key(gm, key_inputs(gm, example_inputs), constants_of(gm),
                                (config.cache_key(target), prefix, gm.meta.get(TRACED_LAYOUT_OUTPUTS_FROM),
                                 str(graph_device(example_inputs))))


def key_inputs(gm: torch.fx.GraphModule, example_inputs) -> list:
    """The inputs as the code key describes them: by their traced symbolic form where the
    graph's sizes are symbolic (the examples are one call's concrete inputs), so a graph
    traced at other sizes, in this process or another, finds the same module."""
    from ..lowering.size_vars import has_symbolic_layout, symbolic_form

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    for node, x in zip(placeholders, example_inputs):
        traced = node.meta.get("val")
        out.append(traced if isinstance(x, torch.Tensor) and has_symbolic_layout(traced) else symbolic_form(node, x))
    return out


def compile(gm: torch.fx.GraphModule, example_inputs, target: Target, config: CompileConfig):
    """One ATen graph -> its ``Executable`` (or its own ``forward`` when it could not be
    compiled and ``raise_internal_errors`` is off)."""
    return compile_graphs([(gm, example_inputs)], target, config)[0]


def compile_graphs(graphs: list, target: Target, config: CompileConfig) -> list:
    """Several ``(aten_gm, example_inputs)`` for one target, built together (C++: one
    library, one compiler run). A graph with symbolic sizes whose code relies on guards
    comes back as ``SizeVariants`` (variants compiled for sizes that break them)."""
    with phase_timer.compile(f"{target.name}_graph", progress=config.progress):  # called alone: a record of its own
        results = _compile_graphs(graphs, target, config)
    return [_with_variants(gm, r, target, config) for (gm, _), r in zip(graphs, results)]


def _with_variants(gm, result, target: Target, config: CompileConfig):
    from .size_variants import SizeVariants, has_symbolic_sizes

    if not isinstance(result, Executable) or "SizeGuardFailed" not in result.source or not has_symbolic_sizes(gm):
        return result   # static, or valid for every size in range: nothing to recompile

    def compile_variant(gm, inputs, number):
        with phase_timer.compile(f"{target.name}_graph", progress=config.progress):
            return _compile_graphs([(gm, inputs)], target, config, variant=(number, _sizes_of(inputs)))[0]
    return SizeVariants(gm, result, compile_variant, config)


def _sizes_of(inputs) -> tuple:
    return tuple(tuple(x.shape) if isinstance(x, torch.Tensor) else x for x in inputs)


def _compile_graphs(graphs: list, target: Target, config: CompileConfig, variant=None) -> list:
    start = time.perf_counter()
    writers = _WRITERS[target.name]
    generated = [_generated_module(gm, inputs, target, config, writers, f"g{k}_" if len(graphs) > 1 else "",
                                   variant)
                 for k, (gm, inputs) in enumerate(graphs)]
    modules = [g for g in generated if isinstance(g, GeneratedModule)]
    try:
        loaded = iter(writers.load(modules, target, config, None) if modules else [])
    except Exception as error:
        fallback = [_failed(error, gm, target, config, "building and loading")
                    for (gm, _), g in zip(graphs, generated) if isinstance(g, GeneratedModule)]
        loaded = iter(fallback)
    elapsed = time.perf_counter() - start
    results = []
    for (gm, _), g in zip(graphs, generated):
        if not isinstance(g, GeneratedModule):
            results.append(g)   # the graph's own forward: it could not be compiled
            continue
        executable = next(loaded)
        if isinstance(executable, Executable):
            executable.schedule, executable.cache_hit = g.schedule, g.cache_hit
            executable.saved_outputs_from = gm.meta.get(TRACED_LAYOUT_OUTPUTS_FROM)
            executable.compile_seconds = elapsed
            write_current(config, "launches.txt", executable.describe_launches)
        results.append(executable)
    hits = sum(g.cache_hit for g in modules)
    logs.log("perf", f"{target.name}: {len(graphs)} graph(s) in {elapsed * 1000:.1f} ms "
                     f"({hits} from the code cache)")
    return results


def _generated_module(gm, example_inputs, target: Target, config: CompileConfig, writers: TargetWriters,
                      prefix: str, variant=None):
    """The graph's module text: from the code cache, or lowered, scheduled and generated;
    the graph's own ``forward`` when that failed (and failures are not raised).
    ``variant``: (number, the sizes it is compiled for) of a symbolic graph's later
    variant, whose guards are chosen from those sizes (part of its key)."""
    from ..runtime import code_cache

    constants = constants_of(gm)
    key = code_key(gm, example_inputs, target, config, prefix if variant is None else (prefix, variant))
    stored = code_cache.read_module(config.cache_dir, writers.module_folder, key)
    if stored is not None:
        path, source = stored
        schedule, hit = None, True
    else:
        try:
            schedule = _schedule(gm, example_inputs, target, config)
            source = writers.generate(schedule, target, config, prefix)
        except Exception as error:
            _needs_static_sizes(gm, error)
            return _failed(error, gm, target, config, "lowering and codegen")
        path = code_cache.write_module(config.cache_dir, writers.module_folder, key, source)
        hit = False
    if logs.enabled("output_code"):
        logs.log("output_code", f"{path}\n{source}")
    if config.debug_dir:
        for name, text in writers.debug_files(source).items():
            write_current(config, name, text)
    return GeneratedModule(source, path, constants, schedule, hit)


def _schedule(gm, example_inputs, target: Target, config: CompileConfig):
    """Lowering and scheduling, refined for the target."""
    from ..errors import SurgeError
    from ..lowering import lower
    from ..schedule import schedule_graph
    from ..schedule.column_fusion import fuse_column_reductions

    graph, _ = lower.lower_graph(gm, example_inputs, target=target, config=config)
    if graph.device.type != target.device_type:
        raise SurgeError(f"the {target.name} backend runs {target.device_type} tensors here, "
                         f"this graph's are on {graph.device}")
    write_current(config, "loop_ir.txt", graph.__str__)
    schedule = schedule_graph(graph, config)
    if target.fuses_column_sums:
        refined = fuse_column_reductions(schedule)
        if refined is not schedule:
            logs.log("schedule", f"refined for the {target.name} target (column sums in row kernels):\n{refined}")
        schedule = refined
    write_current(config, "schedule.txt", schedule.__str__)
    return schedule


def _needs_static_sizes(gm, error: Exception) -> None:
    """A graph with symbolic sizes that could not be lowered is compiled per sizes by the
    backend (``NeedsStaticSizes``), rather than run unfused: most such failures are an op
    whose lowering reads a size as a number."""
    from ..errors import NeedsStaticSizes
    from .size_variants import has_symbolic_sizes

    if has_symbolic_sizes(gm):
        raise NeedsStaticSizes(f"{type(error).__name__}: {error}") from error


def _failed(error: Exception, gm, target: Target, config: CompileConfig, what: str):
    """The one failure policy: raise (``raise_internal_errors``) or announce and run the
    graph's ATen ops as they are."""
    if config.raise_internal_errors:
        raise fallbacks.with_context(error, f"the {target.name} backend's {what}")
    fallbacks.announce(f"backend {target.name!r} could not compile it: {type(error).__name__}: {error}",
                       graph=True, options=config)
    return gm.forward


def load_artifact(artifact: dict, target: Target, config: CompileConfig) -> Executable:
    """An ``Executable`` from its compiled-graph cache artifact: the module from its text
    (stored again in the code cache if it went missing there: Triton reads kernel source
    from files), the kernels from their own caches (built again only if they went missing)."""
    from ..runtime import code_cache

    writers = _WRITERS[target.name]
    if artifact.get("target") != target.name:
        raise ValueError(f"an artifact of the {artifact.get('target')!r} target, not {target.name!r}")
    key = os.path.basename(artifact["path"])[:-3]
    stored = code_cache.read_module(config.cache_dir, writers.module_folder, key)
    if stored is not None and stored[1] == artifact["source"]:
        path = stored[0]
    else:
        path = code_cache.write_module(config.cache_dir, writers.module_folder, key, artifact["source"])
    module = GeneratedModule(artifact["source"], path, artifact["constants"], cache_hit=True)
    executable, = writers.load([module], target, config, artifact["library_source"] or None)
    executable.cache_hit = True
    executable.saved_outputs_from = artifact.get("saved_outputs_from")
    return executable
