"""Entry points of the aot layer: ``aot_compile`` and ``trace_aten``.

``aot_compile`` traces a torch-level graph to ATen for the call it is given
(inference, or joint forward+backward when grad is on and some input requires
grad), runs the pipeline of each IR level (``pipelines.py``), hands each ATen graph to a compiler
``(aten_gm, example_inputs) -> callable`` and returns a callable with the
torch-level graph's calling convention. A later call whose grad-ness differs
(grad mode, which inputs require grad) or under another ambient autocast
compiles that variant once and caches it. Calls where an input updated in place
shares memory with another input run the torch-level graph eagerly.
"""
from __future__ import annotations

import itertools
import operator
import time
from typing import Callable

import torch

from .. import fallbacks, logs
from ..errors import Unsupported
from ..options import Options
from ..frontend.lazy_dynamo import defer_dynamo_import
from ..observe.debug_dir import artifact_part, write_current
from ..observe.phases import phase_timer
from ..passes.pipeline import PassContext, run_pipeline
from .capture import _user_location, insert_copy_back, module_state, trace_program
from .pipelines import ATEN_PIPELINES, ATEN_TRACED, TORCH_GRAPH
from .runtime import InferenceRunner, TrainingRunner
from .symbolic_inputs import concrete

Compiler = Callable[[torch.fx.GraphModule, list], Callable]


def trace_aten(gm: torch.fx.GraphModule, example_inputs, *, decompose: bool = True,
               options: Options | None = None) -> torch.fx.GraphModule:
    """The functional ATen graph of ``gm``, callable with ``gm``'s inputs.

    Parameters and buffers stay get_attr nodes (live references to the module's
    tensors); mutated inputs are copied back at the end. Outputs are flattened
    into a tuple (``graph_module.meta["out_spec"]`` has the structure); unlike
    aot_compile's graphs, an output that is a view of an input is returned as
    that view node.
    """
    options = options or Options()
    program = trace_program(gm, list(example_inputs), decompose=decompose, lift_state=False)
    aten_gm = program.graph_module
    output = next(n for n in reversed(aten_gm.graph.nodes) if n.op == "output")
    mutated_values = list(output.args[0])[: len(program.mutated_inputs)]
    output.args = (tuple(mutated_values) + tuple(program.user_output_nodes),)
    insert_copy_back(aten_gm, program.mutated_inputs, program.input_names)
    aten_gm = run_pipeline(aten_gm, PassContext(keep_random=options.fallback_random, graph_name="aten",
                                                 options=options), ATEN_TRACED)
    aten_gm.meta["out_spec"] = program.out_spec
    return aten_gm


def aot_compile(gm: torch.fx.GraphModule, example_inputs, *, fw_compiler: Compiler,
                bw_compiler: Compiler | None = None, options: Options | None = None,
                cache=None, device_layouts: bool = False) -> Callable:
    """``device_layouts``: lay activations out as the device computes them fastest
    (channels-last 16-bit CUDA convolutions, ``device_layouts.py``) rather than as eager does;
    for code-generating backends, whose outputs still get eager's layouts.
    ``cache``: look each variant up in the compiled-graph cache (and store it there)
    before tracing; the compilers' results must then describe themselves (``artifact()``).
    The driver builds that cache (a ``CacheSpec`` of ``backends/graph_cache.py``) and hands
    it in; aot only calls its ``key``, ``load`` and ``store``."""
    defer_dynamo_import()  # the tracer's dispatch modes would import Dynamo on their first call
    compiled = AotCompiled(gm, fw_compiler, bw_compiler or fw_compiler, options or Options(), cache,
                           device_layouts)
    compiled.variant_for(list(example_inputs) + compiled.state_values(), _autocast_state())
    return compiled


# The variant of a later call that could not be compiled: the torch-level graph runs eagerly.
_NOT_COMPILED = object()


class AotCompiled:
    """The callable aot_compile returns; one compiled variant per grad-ness and autocast state."""

    def __init__(self, gm, fw_compiler: Compiler, bw_compiler: Compiler, options: Options,
                 cache=None, device_layouts: bool = False):
        # the frontend's graph stays as it was captured (its disk record is written from it);
        # the cache key is the rewritten graph's
        gm = self.gm = run_pipeline(gm, PassContext(graph_name="torch", options=options), TORCH_GRAPH)
        self.device_layouts = device_layouts
        self.cache = cache
        self.fw_compiler = fw_compiler
        self.bw_compiler = bw_compiler
        self.options = options
        self.state_names = [names[0] for names, _ in module_state(gm)]
        # read on every call: one C-level getter for all dotted names, not a Python walk per name
        self._state_getter = operator.attrgetter(*self.state_names) if self.state_names else None
        self.num_user_inputs = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
        self.variants: dict[tuple, Callable] = {}
        self._alias_answers: dict = {}   # runner -> (inputs' data pointers and offsets, sizes, answer)
        self.final_grad_mode = _final_grad_mode(gm)
        self.ran_eagerly = False
        # The user's code this graph is part of: a variant compiled on a later call, or a
        # call run eagerly, announces its fallbacks there (fallbacks.py).
        self.site = fallbacks.current_site()
        _reject_input_metadata_mutation(gm)

    def state_values(self) -> list:
        if self._state_getter is None:
            return []
        values = self._state_getter(self.gm)
        return list(values) if len(self.state_names) > 1 else [values]

    def __call__(self, *args):
        inputs = list(args) + self.state_values()
        autocast = _autocast_state()
        runner = self.variant_for(inputs, autocast)
        if runner is _NOT_COMPILED:
            return self.gm(*args)
        if runner.program.mutated_inputs and self._aliases(runner, inputs):
            return self._run_eagerly(args)
        if autocast:
            # The variant was traced under this autocast state: its casts are in
            # the graphs, and generated kernels must not be cast again.
            with torch._C._DisableAutocast():
                result = runner(inputs)
        else:
            result = runner(inputs)
        if self.final_grad_mode is not None:
            # The graph's own grad-mode switches were traced away; the mode it
            # leaves behind is global state that outlives the call, as in eager.
            torch._C._set_grad_enabled(self.final_grad_mode)
        return result

    def _aliases(self, runner, inputs: list) -> bool:
        """``_mutated_input_aliases``, walked only when some input's storage may have moved.

        Each input's storage starts at ``data_ptr() - storage_offset() * element_size()``
        (two live storages never start at one address), so the data pointers and offsets
        of the inputs decide which of them share a storage: the answer is kept for the
        last ones seen (with the sizes, when some inputs do share one: the walk skips
        empty tensors). When all starts are distinct no two inputs share memory, which is
        one set's size to check, not the walk. A call with the same inputs' memory as the
        last (an optimizer step, a model's weights and a batch in the same block) reads
        two numbers per input, in C."""
        tensors = inputs if _all_tensors(inputs) else [t for t in inputs if isinstance(t, torch.Tensor)]
        mutated = runner.program.mutated_inputs
        try:
            key = (tuple(map(_DATA_PTR, tensors)), tuple(map(_STORAGE_OFFSET, tensors)))
        except RuntimeError:   # a tensor without storage: the walk says what it shares
            return _mutated_input_aliases(mutated, inputs)
        known = self._alias_answers.get(runner)
        if known is not None and known[0] == key and (known[1] is None or known[1] == tuple(map(_NUMEL, tensors))):
            return known[2]
        pointers, offsets = key
        starts = set(map(operator.sub, pointers, map(operator.mul, offsets, map(_ELEMENT_SIZE, tensors))))
        if len(starts) == len(tensors):
            self._alias_answers[runner] = (key, None, False)
            return False
        # some inputs share a storage (tied weights, views of one tensor): the walk decides
        answer = _mutated_input_aliases(mutated, inputs)
        self._alias_answers[runner] = (key, tuple(map(_NUMEL, tensors)), answer)
        return answer

    def _run_eagerly(self, args):
        # The graphs were traced for inputs with separate memory; an in-place
        # update through one input must be seen through its aliases: only the
        # torch-level graph, run op by op, does that.
        if not self.ran_eagerly:
            self.ran_eagerly = True
            with fallbacks.at_user_code(self.site):
                fallbacks.announce("an input it updates in place shares memory with another input "
                                   "(such calls run the graph eagerly)", graph=True, options=self.options)
        return self.gm(*args)

    def variant_for(self, inputs: list, autocast: tuple):
        # under no_grad no input's flag matters: skip the walk over every parameter
        flags = _requires_grad_flags(inputs) if torch.is_grad_enabled() else ()
        training = any(flags)
        key = (flags if training else (), autocast)
        runner = self.variants.get(key)
        if runner is None:
            start = time.perf_counter()
            with phase_timer.phase("aot"), fallbacks.at_user_code(self.site):
                cache_key = self.cache.key(self.gm, inputs, (training, key), self.options) if self.cache else None
                runner = self._cached_runner(cache_key) if cache_key else None
                hit = runner is not None
                if not hit:
                    try:
                        runner = (self._compile_training(inputs, list(flags)) if training
                                  else self._compile_inference(inputs))
                    except Exception as error:
                        if not self.variants or self.options.raise_internal_errors or self.options.fullgraph:
                            raise  # the first variant: the frontend runs the whole frame eagerly
                        # a later call's variant: never fail the user's program
                        fallbacks.announce(f"its {'training' if training else 'inference'} variant could not be "
                                           f"compiled ({type(error).__name__}: {error}); such calls run the "
                                           "graph eagerly", graph=True, options=self.options)
                        runner, cache_key = _NOT_COMPILED, None
                    if cache_key:
                        self.cache.store(cache_key, runner.program, runner.forward, getattr(runner, "backward", None))
            self.variants[key] = runner
            logs.log("perf", f"aot: {'training' if training else 'inference'} graphs in "
                             f"{time.perf_counter() - start:.3f}s{' (graph cache)' if hit else ''}")
        return runner

    def _cached_runner(self, cache_key: str):
        loaded = self.cache.load(cache_key)
        if loaded is None:
            return None
        program, forward, backward = loaded
        return InferenceRunner(program, forward) if backward is None else TrainingRunner(program, forward, backward)

    def _user_inputs(self, inputs):
        return inputs[: self.num_user_inputs]

    def _compile_inference(self, inputs) -> InferenceRunner:
        with torch.no_grad():
            program = trace_program(self.gm, self._user_inputs(inputs), lift_state=True,
                                    device_layouts=self.device_layouts)
        forward = program.graph_module
        insert_copy_back(forward, program.mutated_inputs, program.input_names)
        forward = self._passes(forward, "inference")
        _distinct_values(forward, 0, program.num_values)
        if logs.enabled("aot"):
            logs.log("aot", f"inference graph:\n{forward.print_readable(print_output=False)}")
        write_current(self.options, "aten_forward.py", lambda: forward.print_readable(print_output=False))
        return InferenceRunner(program, self.fw_compiler(forward, inputs))

    def _compile_training(self, inputs, flags) -> TrainingRunner:
        from .partition import partition_joint, prune_unused_saved

        program = trace_program(self.gm, self._user_inputs(inputs), lift_state=True, grad_inputs=flags,
                                device_layouts=self.device_layouts)
        joint = self._passes(program.graph_module, "joint")
        if logs.enabled("aot"):
            logs.log("aot", f"joint graph:\n{joint.print_readable(print_output=False)}")
        parts = partition_joint(joint, num_inputs=program.num_inputs, num_tangents=program.num_tangents,
                                num_forward_outputs=len(program.mutated_inputs) + program.num_values)
        forward, backward = parts.forward, parts.backward
        num_forward_outputs = len(program.mutated_inputs) + program.num_values
        _save_mutated_inputs_by_value(forward, program, num_forward_outputs)
        insert_copy_back(forward, program.mutated_inputs, program.input_names)
        forward = self._passes(forward, "forward")
        backward = self._passes(backward, "backward")
        prune_unused_saved(forward, backward, num_values=program.num_values)
        _distinct_values(forward, 0, program.num_values)
        if logs.enabled("aot"):
            logs.log("aot", f"partition saves {parts.num_saved} tensors ({parts.saved_bytes} bytes)\n"
                            f"forward graph:\n{forward.print_readable(print_output=False)}\n"
                            f"backward graph:\n{backward.print_readable(print_output=False)}")
        write_current(self.options, "aten_forward.py", lambda: forward.print_readable(print_output=False))
        write_current(self.options, "aten_backward.py", lambda: backward.print_readable(print_output=False))
        write_current(self.options, "partition.txt", lambda: _describe_saved(backward, program.num_tangents))
        bw_inputs = [_example_like(n.meta["val"], n.meta.get("device"))
                     for n in backward.graph.nodes if n.op == "placeholder"]
        # the backward is compiled for the saved tensors' traced layouts: the forward's
        # compiler must return them in those (lowering/lower.py)
        forward.meta["traced_layout_outputs_from"] = num_forward_outputs
        compiled_forward = self.fw_compiler(forward, inputs)
        with artifact_part("backward"):  # the backward's kernels get their own artifact names
            compiled_backward = self.bw_compiler(backward, bw_inputs)
        return TrainingRunner(program, compiled_forward, compiled_backward)

    def _passes(self, gm, level: str):
        # a variant loaded from the compiled-graph cache runs none (the steps import their passes)
        return run_pipeline(gm, PassContext(keep_random=self.options.fallback_random, graph_name=level,
                                            options=self.options), ATEN_PIPELINES[level])



def _describe_saved(backward: torch.fx.GraphModule, num_tangents: int) -> str:
    """``partition.txt``: what the forward saves for the backward (the backward's
    inputs before its tangents), one tensor a line."""
    placeholders = [n for n in backward.graph.nodes if n.op == "placeholder"]
    saved = placeholders[: len(placeholders) - num_tangents]
    lines = []
    total = 0
    for node in saved:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            size = concrete(val.numel()) * val.element_size()
            total += size
            lines.append(f"  {node.name}: {str(val.dtype).replace('torch.', '')}{list(val.shape)} ({size} bytes)")
        else:
            lines.append(f"  {node.name}: {type(val).__name__}")
    return f"saved for backward: {len(saved)} values, {total} bytes\n" + "\n".join(lines) + "\n"


def _save_mutated_inputs_by_value(forward, program, num_forward_outputs: int) -> None:
    """A saved input that the forward then updates in place is saved as a clone:
    the backward needs the value it had, not what the copy-back leaves in it."""
    mutated = {program.input_names[i] for i in program.mutated_inputs}
    output = next(n for n in reversed(forward.graph.nodes) if n.op == "output")
    results = list(output.args[0])
    for k in range(num_forward_outputs, len(results)):
        node = results[k]
        if node is not None and node.op == "placeholder" and node.name in mutated:
            with forward.graph.inserting_before(output):
                results[k] = forward.graph.call_function(torch.ops.aten.clone.default, (node,))
            results[k].meta = dict(node.meta)
    output.args = (tuple(results),)
    from ..passes.graph_code import code_changed   # compile-time only: warm calls import no passes
    code_changed(forward)


def _distinct_values(gm: torch.fx.GraphModule, start: int, stop: int) -> None:
    """Give each user-visible output in ``[start, stop)`` its own node.

    CSE merges equal computations, e.g. ``x @ w`` under no_grad and again with grad
    on; eager returns two tensors, so the later occurrences become clones: an
    in-place update of one must not show through the other, and each keeps its
    own requires_grad.
    """
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    results = list(output.args[0])
    seen = set()
    changed = False
    for k in range(start, min(stop, len(results))):
        node = results[k]
        if not isinstance(node, torch.fx.Node):
            continue
        if node in seen:
            with gm.graph.inserting_before(output):
                results[k] = gm.graph.call_function(torch.ops.aten.clone.default, (node,))
            results[k].meta = dict(node.meta)
            changed = True
        seen.add(node)
    if changed:
        output.args = (tuple(results),)
        from ..passes.graph_code import code_changed
        code_changed(gm)


def _autocast_state() -> tuple:
    """Ambient autocast (device, dtype) pairs: tracing bakes their casts into the graphs."""
    if not torch._C._is_any_autocast_enabled():  # the common case, one call
        return ()
    return tuple((device, torch.get_autocast_dtype(device))
                 for device in ("cpu", "cuda") if torch.is_autocast_enabled(device))


def _final_grad_mode(gm: torch.fx.GraphModule) -> bool | None:
    """The grad mode the torch-level graph leaves set (its last switch), or None."""
    switches = [n.args[0] for n in gm.graph.nodes
                if n.op == "call_function" and n.target is torch._C._set_grad_enabled]
    return bool(switches[-1]) if switches else None


def _reject_input_metadata_mutation(gm: torch.fx.GraphModule) -> None:
    # ``x.requires_grad_()`` changes which outputs eager differentiates from that
    # point on; the variant (inference or training) is chosen before the call.
    for node in gm.graph.nodes:
        if node.op == "call_method" and node.target == "requires_grad_":
            raise Unsupported("requires_grad_() inside a compiled graph is not supported by the aot layer",
                              _user_location(node))


# the C methods themselves: mapped over the inputs they run without a Python frame per input
_DATA_PTR = torch.Tensor.data_ptr
_STORAGE_OFFSET = torch.Tensor.storage_offset
_ELEMENT_SIZE = torch.Tensor.element_size
_NUMEL = torch.Tensor.numel
_REQUIRES_GRAD = operator.attrgetter("requires_grad")


def _all_tensors(inputs: list) -> bool:
    return all(map(isinstance, inputs, itertools.repeat(torch.Tensor)))


def _requires_grad_flags(inputs: list) -> tuple:
    """Whether each input is a tensor that requires grad (read in C when all are tensors)."""
    if _all_tensors(inputs):
        return tuple(map(_REQUIRES_GRAD, inputs))
    return tuple(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)


def _mutated_input_aliases(mutated: list[int], inputs: list) -> bool:
    """Whether an input the graph updates in place shares memory with another input."""
    storages: dict[int, int] = {}
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.numel() > 0:
            ptr = t.untyped_storage().data_ptr()
            storages[ptr] = storages.get(ptr, 0) + 1
    return any(isinstance(inputs[i], torch.Tensor) and inputs[i].numel() > 0
               and storages[inputs[i].untyped_storage().data_ptr()] > 1 for i in mutated)


def _example_like(meta, device):
    # The backward's inputs do not exist yet at compile time: give its compiler
    # uninitialized tensors of the right layout on the real device.
    if not isinstance(meta, torch.Tensor):
        return concrete(meta)  # a symbolic size the backward takes: its hint
    return torch.empty_strided(concrete(tuple(meta.shape)), concrete(tuple(meta.stride())), dtype=meta.dtype,
                               device=device)
