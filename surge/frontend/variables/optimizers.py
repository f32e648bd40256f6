"""``torch.optim`` optimizers in compiled code: ``opt.step()`` as part of the graph.

torch's optimizers are plain Python over tensors, so capture runs their code
like any library code. Three things need rules of their own:

* ``step`` is wrapped by torch's ``_use_grad_for_differentiable``, which sets the
  grad mode to ``defaults["differentiable"]`` around the update and calls
  ``torch._dynamo.graph_break()`` twice (there only so that torch.compile's aot
  layer sees an inference graph). Here the wrapper is traced as the grad-mode
  switch it is, without the breaks: the update lands in the caller's graph
  under ``no_grad``, and the aot layer turns its in-place writes into one
  copy-back per parameter and state tensor.
* The optimizer's state is a dict keyed by the parameters (``opt.state[p]``).
  It is read through ``OptimizerStateVariable``: the entry of parameter ``i`` of
  group ``g`` has the source ``dict.__getitem__(opt.state, opt.param_groups[g]
  ['params'][i])``, so its tensors (``exp_avg``, ``step``, ...) are graph inputs
  guarded on their metadata, never on their values: a step counter that grows
  every call is read, not specialized on.
* State is created lazily by the first ``step()`` (``_init_group``: zeros and a
  ``step`` tensor). Before the step is traced, ``_init_group`` runs for real on
  each group (as eager's first step would, with the same values), so the trace
  and every later call see the same state layout and the first step does not
  get a graph of its own. SGD's momentum buffers are made by its first update
  itself (``clone(grad)``), so its second step is one recompile, as under
  torch.compile.

Hyperparameters in ``param_groups`` (``lr``, ``betas``, ...) are Python numbers
read by the trace: they are constants of the graph, guarded by value, so
changing ``lr`` recompiles once per distinct value (up to ``cache_size_limit``).
A tensor ``lr`` (``torch.optim.Adam(params, lr=torch.tensor(1e-3))``) is a graph
input instead and never recompiles.

On CUDA, a group whose state is not yet created gets ``capturable=True`` (as
torch.compile does, "Note [torch.compile x capturable]" in torch/optim): its
``step`` counters then live on the device next to the parameters, and torch's
step takes the code path written for compilers instead of calling itself
eagerly (``_disable_dynamo_if_unsupported``).
"""
from __future__ import annotations

import inspect
import operator
import os
import types
from dataclasses import dataclass

import torch
from torch.optim import optimizer as torch_optimizer

from ..sources import AttrSource, ItemSource
from .base import Variable, unsupported
from .constant import ConstantVariable
from .containers import ListVariable
from .contexts import set_grad_mode
from .functions import UserFunctionVariable, UserMethodVariable
from .objects import UserObjectVariable
from .tensor import TENSOR_METHODS, TensorVariable, record_op
from .torch_fns import TORCH_FUNCTION_RULES

# The code object of the wrapper torch puts around every optimizer's ``step``.
USE_GRAD_CODE = torch_optimizer._use_grad_for_differentiable(lambda self: None).__code__


@dataclass(frozen=True)
class OptimizerStateSource:
    """``opt.state[p]`` for parameter ``index`` of group ``group``, read past the
    defaultdict's ``__missing__`` (a guard must not insert an entry)."""

    parent: "object"
    group: int
    index: int

    def name(self):
        return f"{self.parent.name()}.state[<param_groups[{self.group}]['params'][{self.index}]>]"

    def expr(self, parent, consts):
        getitem = consts.ref(dict.__getitem__, "dict_getitem")
        return f"{getitem}({parent}.state, {parent}.param_groups[{self.group}]['params'][{self.index}])"


def param_source(opt_source, group: int, index: int):
    return ItemSource(ItemSource(ItemSource(AttrSource(opt_source, "param_groups"), group), "params"), index)


class OptimizerVariable(UserObjectVariable):
    """A ``torch.optim.Optimizer`` read from the inputs (type-guarded like any object);
    its ``state`` is read per parameter."""

    def getattr(self, tx, name):
        if name == "state" and tx.side_effects.attribute(self.obj, name) is None \
                and type(self.obj.__dict__.get("state")) is not dict:
            return OptimizerStateVariable(self)
        found = super().getattr(tx, name)
        if name == "_init_group":
            return _without_dynamo_disable(found)
        return found


_DYNAMO_EVAL_FRAME = os.path.join("torch", "_dynamo", "eval_frame.py")


def _without_dynamo_disable(method):
    """Once torch.compile has run in the process, Dynamo has replaced every optimizer
    class's ``_init_group`` with a wrapper that keeps Dynamo out of it (and switches
    Dynamo's frame hook off and on, which capture refuses). The wrapper runs the method
    it wraps and nothing else, so that method is traced; the class entry's identity,
    guarded by the lookup, fixes which one it is."""
    fn = getattr(method, "fn", None)
    wrapped = getattr(getattr(fn, "fn", None), "__wrapped__", None)
    if isinstance(method, UserMethodVariable) and isinstance(wrapped, types.FunctionType) \
            and fn.fn.__code__.co_filename.endswith(_DYNAMO_EVAL_FRAME):
        return UserMethodVariable(UserFunctionVariable(wrapped, None), method.self_var)
    return method


class OptimizerStateVariable(Variable):
    """``opt.state``: a defaultdict keyed by the optimizer's parameters. Each entry read
    is wrapped from its own source; entries the trace creates are refused (the state of
    a parameter with a gradient is created before the trace, ``prepare_state``)."""

    keys_tensors_by_identity = True

    def __init__(self, optimizer: OptimizerVariable):
        self.optimizer = optimizer

    def python_type(self):
        return type(self.optimizer.obj.state)

    def truthy(self, tx):
        unsupported("the truth value of an optimizer's state dict")

    def _position(self, key: Variable) -> tuple[int, int]:
        real = key.real if isinstance(key, TensorVariable) else None
        if real is None:
            unsupported("optimizer state indexed by something other than one of its parameters")
        for g, group in enumerate(self.optimizer.obj.param_groups):
            for i, p in enumerate(group["params"]):
                if p is real:
                    return g, i
        unsupported("optimizer state indexed by a tensor that is not one of its parameters")

    def getitem(self, tx, key: Variable) -> Variable:
        g, i = self._position(key)
        opt, opt_source = self.optimizer.obj, self.optimizer.source
        canonical = param_source(opt_source, g, i)
        if key.source != canonical:
            # The trace found the key elsewhere (model.parameters()): the call's tensor there
            # must be the parameter the state entry is read for.
            tx.guards.add(key.source, "{v} is {w}", f"{key.source.name()} is {canonical.name()}", other=canonical)
        param = opt.param_groups[g]["params"][i]
        if param not in opt.state:
            unsupported("optimizer state created inside compiled code (a parameter without state)")
        # One guard says the state's entries are distinct dicts (torch makes one per
        # parameter), instead of an `is not` guard for every pair of entries read.
        tx.guards.add(opt_source, "len(set(map(id, {v}.state.values()))) == len({v}.state)",
                      f"the entries of {opt_source.name()}.state are distinct objects")
        return tx.wrap(opt.state[param], OptimizerStateSource(opt_source, g, i), distinct_group=(id(opt), "state"))

    def contains(self, tx, item):
        unsupported("`in` on an optimizer's state dict")

    def getattr(self, tx, name):
        unsupported(f"optimizer state method {name!r} in compiled code")


def prepare_state(opt: torch.optim.Optimizer) -> None:
    """Create the state ``step()`` would create lazily, for real, before it is traced:
    each group's ``_init_group`` on fresh lists (it makes zeros and step counters only for
    parameters with a gradient and no state yet). On CUDA, an uninitialized group takes
    the capturable path first, as under torch.compile."""
    init_group = getattr(opt, "_init_group", None)
    if init_group is None:
        return
    try:
        n_lists = len(inspect.signature(init_group).parameters) - 1  # after the group
    except (TypeError, ValueError):
        return
    for group in opt.param_groups:
        params = group["params"]
        if "capturable" in group and params and all(p.is_cuda for p in params) \
                and not any(p in opt.state for p in params):
            group["capturable"] = True
        try:
            init_group(group, *([] for _ in range(n_lists)))
        except Exception as e:  # a signature torch's optimizers do not have: trace it instead
            if not isinstance(e, (TypeError, ValueError, AttributeError)):
                raise
            return


def trace_optimizer_step(tx, fn, args: list, kwargs: dict) -> Variable:
    """The inlined ``_use_grad`` wrapper of an optimizer's ``step``: create its state, run
    the step under ``defaults['differentiable']`` grad mode, restore the mode."""
    if not isinstance(fn, UserFunctionVariable) or not args or not isinstance(args[0], OptimizerVariable):
        unsupported("an optimizer step that is not a method of an optimizer read from the inputs")
    opt = args[0].obj
    prepare_state(opt)
    differentiable = bool(opt.defaults.get("differentiable", False))
    inner = dict(zip(fn.code.co_freevars, fn.fn.__closure__))["func"].cell_contents
    prior = tx.grad_enabled
    set_grad_mode(tx, differentiable)
    result = UserFunctionVariable(inner, None).call(tx, args, kwargs)
    set_grad_mode(tx, prior)
    return result


def is_optimizer(value) -> bool:
    return isinstance(value, torch.optim.Optimizer)



def _pointwise_with_tensor_value(name: str, combine: str):
    """``t.addcdiv_(t1, t2, value=v)`` with a 0-d tensor ``v`` (torch's single-tensor Adam
    passes ``-step_size``, a tensor when compiling): eager reads ``v`` into a Python number;
    the graph computes ``t + v * t1 / t2`` in eager's order (``(v * t1) / t2``)."""

    def rule(tx, t, args, kwargs):
        value = kwargs.get("value", args[2] if len(args) > 2 else None)
        if not isinstance(value, TensorVariable):
            return record_op(tx, "call_method", name, [t, *args], kwargs)
        t1, t2 = args[0], args[1]
        scaled = record_op(tx, "call_function", operator.mul, [value, t1], {})
        term = record_op(tx, "call_function", getattr(operator, combine), [scaled, t2], {})
        return record_op(tx, "call_method", "add_" if name.endswith("_") else "add", [t, term], {})
    return rule


for _name, _combine in (("addcdiv_", "truediv"), ("addcmul_", "mul"), ("addcdiv", "truediv"), ("addcmul", "mul")):
    TENSOR_METHODS[_name] = _pointwise_with_tensor_value(_name, _combine)


def _foreach_with_tensor_scalars(tx, fn, args, kwargs):
    """``torch._foreach_addcdiv_(params, t1, t2, scalars)`` with ``scalars`` a tensor (torch's
    multi-tensor Adam when compiling: one step size per parameter). Its meta kernel insists
    the scalars live on the CPU, which a meta tensor does not: the metadata comes from the
    same call with Python numbers in their place, the node reads the tensor."""
    args = list(args)
    scalars = kwargs.get("scalars", args[3] if len(args) > 3 else None)
    if not isinstance(scalars, TensorVariable) or not isinstance(args[0], ListVariable) or not args[0].items:
        return record_op(tx, "call_function", fn, args, dict(kwargs))
    stand_in = ListVariable([ConstantVariable(1.0) for _ in args[0].items])
    if "scalars" in kwargs:
        kwargs = {**kwargs, "scalars": stand_in}
    else:
        args[3] = stand_in
    result = record_op(tx, "call_function", fn, args, dict(kwargs))
    node = result.items[0].node.args[0]
    if "scalars" in node.kwargs:
        node.kwargs = {**node.kwargs, "scalars": scalars.node}
    else:
        node.args = (*node.args[:3], scalars.node, *node.args[4:])
    return result


for _fn in (torch._foreach_addcdiv_, torch._foreach_addcmul_, torch._foreach_addcdiv, torch._foreach_addcmul):
    TORCH_FUNCTION_RULES[_fn] = _foreach_with_tensor_scalars
