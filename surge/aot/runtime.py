"""Running compiled ATen graphs as eager would: outputs, aliases and autograd.

``InferenceRunner`` calls the forward graph. ``TrainingRunner`` wraps forward and
backward graphs in a ``torch.autograd.Function``, so eager autograd drives the
compiled backward: gradient accumulation, ``retain_graph``, inputs that do not
require grad and non-differentiable outputs behave as for any autograd
Function. Double backward through a compiled region raises a clear error.

Both rebuild the user's outputs from the graph's values with ``assemble_outputs``:
views of inputs are replayed on the real inputs (after the graph copied mutated
inputs back), so they alias the inputs exactly as eager's outputs do.
"""
from __future__ import annotations

import operator
from typing import Callable

import torch
from torch.utils import _pytree as pytree

from ..errors import SurgeError
from .boxed import call_compiled
from .capture import OutputSpec, TracedProgram
from .symbolic_inputs import resolve_chain


def _replay(tensor, chain, inputs):
    if any(step.symbolic for step in chain):
        chain = resolve_chain(chain, inputs)
    for step in chain:
        tensor = step.apply(tensor)
    return tensor


def assemble_outputs(program: TracedProgram, inputs, values):
    flat = []
    for spec in program.outputs:
        flat.append(_ASSEMBLERS[spec.kind](spec, inputs, values))
    return pytree.tree_unflatten(flat, program.out_spec)


def output_assembler(program: TracedProgram) -> Callable[[list, list], object]:
    """``assemble_outputs`` for one program, decided once: outputs that are graph values as
    they are (one tensor, or a flat tuple of them: most programs) skip the per-output
    dispatch and pytree's rebuild, a few microseconds of every call."""
    spec = program.out_spec
    if all(out.kind == "graph" for out in program.outputs):
        positions = [out.index for out in program.outputs]
        if spec.is_leaf():
            position = positions[0]
            return lambda inputs, values: values[position]
        if spec.type is tuple and all(child.is_leaf() for child in spec.children()):
            return lambda inputs, values: tuple([values[k] for k in positions])
    return lambda inputs, values: assemble_outputs(program, inputs, values)


_ASSEMBLERS: dict[str, Callable[[OutputSpec, list, list], object]] = {
    "graph": lambda spec, inputs, values: values[spec.index],
    "input_view": lambda spec, inputs, values: _replay(inputs[spec.index], spec.chain, inputs),
    "output_view": lambda spec, inputs, values: _replay(values[spec.index], spec.chain, inputs),
    "constant_view": lambda spec, inputs, values: _replay(spec.value, spec.chain, inputs),
    "constant": lambda spec, inputs, values: spec.value,
}


class InferenceRunner:
    """Forward only: no autograd graph is recorded around the compiled call."""

    def __init__(self, program: TracedProgram, forward: Callable):
        self.program = program
        self.forward = forward
        self.assemble = output_assembler(program)

    def __call__(self, inputs: list):
        return self.assemble(inputs, call_compiled(self.forward, list(inputs)))


class TrainingRunner:
    """Forward and backward graphs behind one ``torch.autograd.Function``."""

    def __init__(self, program: TracedProgram, forward: Callable, backward: Callable):
        self.program = program
        self.forward = forward
        self.backward = backward
        self.num_values = program.num_values
        self.differentiable = program.value_requires_grad
        self.grad_inputs = program.grad_inputs
        self.assemble = output_assembler(program)
        # The Function takes the inputs that require grad as its tensor arguments and all
        # inputs as one list: apply walks only the former (the edges of its graph node),
        # not the buffers and inputs that no gradient reaches (half of a CNN's inputs).
        self.pick_grad_inputs = _picker(program.grad_inputs)

    def __call__(self, inputs: list):
        if not any(self.differentiable):
            # No value it returns is differentiable (an optimizer step returns nothing):
            # no backward can reach this call, so it runs as the Function's forward would,
            # under no_grad, without the Function (whose apply walks every input).
            with torch.no_grad():
                results = call_compiled(self.forward, list(inputs))
            return self.assemble(inputs, tuple(results[: self.num_values]))
        return self.assemble(inputs, CompiledFunction.apply(self, inputs, *self.pick_grad_inputs(inputs)))


def _picker(positions: list) -> Callable[[list], tuple]:
    """``lambda inputs: tuple(inputs[k] for k in positions)``, in C."""
    if not positions:
        return lambda inputs: ()
    if len(positions) == 1:
        position = positions[0]
        return lambda inputs: (inputs[position],)
    return operator.itemgetter(*positions)


class CompiledFunction(torch.autograd.Function):
    """Saved tensors live on ``ctx.stash`` rather than in ``save_for_backward``.

    That lets the backward graph free each one after its last use (boxed call),
    and drop them all once the backward ran unless the graph is retained. The
    checks that ``save_for_backward`` would do (in-place modification, a second
    backward) are done here. Saved tensors that share storage with an output do
    go through ``save_for_backward``: holding them on ctx would make a reference
    cycle through the output's grad_fn. So do all of them while saved-tensor
    hooks are active, so that the hooks see every saved tensor.

    ``forward(ctx, runner, inputs, *grad_inputs)``: ``inputs`` is every input of the
    graph; ``grad_inputs`` are those that require grad (``runner.grad_inputs``), passed
    again as the Function's tensor arguments so that autograd connects them, and only them.
    """

    @staticmethod
    def forward(ctx, runner: TrainingRunner, inputs: list, *grad_inputs):
        results = call_compiled(runner.forward, list(inputs))
        values, saved = results[: runner.num_values], results[runner.num_values:]
        if _saved_tensor_hooks_active():
            # The user packs saved tensors (offloading, checkpointing): all go
            # through save_for_backward, where the hooks see them.
            through_ctx = [i for i, t in enumerate(saved) if not isinstance(t, _NUMBERS)]
        else:
            through_ctx = _sharing_output_storage(saved, values)
        ctx.save_for_backward(*[saved[i] for i in through_ctx])
        ctx.stash = list(saved)
        for i in through_ctx:
            ctx.stash[i] = None
        ctx.versions = [t._version if isinstance(t, torch.Tensor) else 0 for t in ctx.stash]
        ctx.runner = runner
        ctx.mark_non_differentiable(*[
            v for v, d in zip(values, runner.differentiable) if isinstance(v, torch.Tensor) and not d])
        return tuple(values)

    @staticmethod
    def backward(ctx, *grad_values):
        if torch.is_grad_enabled():
            raise SurgeError(
                "double backward (create_graph=True, or differentiating a gradient) through a "
                "surge-compiled region is not supported; compute higher-order gradients eagerly")
        runner: TrainingRunner = ctx.runner
        args = _saved_tensors(ctx)
        if not _graph_retained():
            ctx.stash = None
        args += [g.contiguous() for g, d in zip(grad_values, runner.differentiable) if d]
        grads = call_compiled(runner.backward, args)
        return (None, None, *grads)   # runner, inputs, then one gradient per grad input


def _sharing_output_storage(saved, values) -> list:
    """Positions of the saved tensors that share storage with an output (or are undefined:
    an op may leave an optional result undefined at runtime, mkldnn_rnn_layer's workspace,
    and a None on the stash would read as "held by ctx"). A tensor's data starts inside
    its storage, and storages do not overlap: a data pointer inside an output's storage
    is a tensor of that storage (an empty one holds no memory a cycle could keep)."""
    spans = []
    for v in values:
        storage = _storage(v) if isinstance(v, torch.Tensor) else None
        if storage is not None and storage.nbytes():
            start = storage.data_ptr()
            spans.append((start, start + storage.nbytes()))
    try:
        if len(spans) == 1:   # the common case, one output: a comparison per saved tensor
            (low, high), = spans
            return [i for i, t in enumerate(saved)
                    if t is None or (not isinstance(t, _NUMBERS) and low <= t.data_ptr() < high)]
        return [i for i, t in enumerate(saved)
                if t is None or (not isinstance(t, _NUMBERS) and _inside(t.data_ptr(), spans))]
    except RuntimeError:   # a tensor without storage (efficient zero tensors)
        output_storages = {_storage_ptr(v) for v in values if isinstance(v, torch.Tensor)}
        return [i for i, t in enumerate(saved)
                if t is None or (not isinstance(t, _NUMBERS) and _storage_ptr(t) in output_storages)]


def _inside(pointer: int, spans: list) -> bool:
    return any(low <= pointer < high for low, high in spans)


def _saved_tensors(ctx) -> list:
    if ctx.stash is None:
        raise RuntimeError(
            "Trying to backward through the graph a second time (or directly access saved tensors "
            "after they have already been freed). Specify retain_graph=True if you need to backward "
            "through the graph a second time.")
    for t, version in zip(ctx.stash, ctx.versions):
        if isinstance(t, torch.Tensor) and t._version != version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: a tensor of shape {tuple(t.shape)} saved by a surge-compiled "
                f"region is at version {t._version}; expected version {version} instead.")
    from_ctx = iter(ctx.saved_tensors)
    return [t if t is not None else next(from_ctx) for t in ctx.stash]


# Symbolic sizes the backward takes are saved as the numbers they are in this call.
_NUMBERS = (int, float)


def _storage(t: torch.Tensor):
    try:
        return t.untyped_storage()
    except RuntimeError:  # tensors without storage (efficient zero tensors)
        return None


def _storage_ptr(t: torch.Tensor) -> int | None:
    storage = _storage(t)
    return None if storage is None else storage.data_ptr()


def _saved_tensor_hooks_active() -> bool:
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return True if top is None else top(False) is not None


def _graph_retained() -> bool:
    keep_graph = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    return True if keep_graph is None else bool(keep_graph())
