"""A recorder that replays on the CPU, and Executables that run ATen graphs as they are,
so that the CUDA graph wrapper's decisions run in CI without a GPU.

``FakeRecorder`` behaves as a CUDA graph does where the wrapper can tell: recording runs
no work visible to the caller (the function runs on copies of the inputs, to make the
outputs), a replay reads the inputs' memory where it was at recording time and writes
the same output tensors, and ``invalidate`` marks a tensor (``stale_message``).
"""
from __future__ import annotations

import contextlib
import types

import weakref

import torch

from surge.aot import aot_compile
from surge.aot.boxed import boxed_graph_runner
from surge.backends.cudagraph_recorder import Recording
from surge.backends.cudagraphs import CudaGraphed, GraphPool, RecordedPerSize
from surge.backends.executable import Executable
from surge.backends.size_variants import has_symbolic_sizes


def _alias(t: torch.Tensor) -> torch.Tensor:
    """``t``'s memory, without holding ``t`` (a recording does not keep its inputs alive)."""
    whole = t.untyped_storage()
    storage = torch._C._construct_storage_from_data_pointer(whole.data_ptr(), t.device, whole.nbytes())
    return t.new_empty(0).set_(storage, t.storage_offset(), t.shape, t.stride())


class FakePool:
    def __init__(self, number: int):
        self.number = number
        self.recordings = 0
        self.alive = 0    # recordings not yet released


def _release(pool: FakePool) -> None:
    pool.alive -= 1


class FakeRecorder:
    device_type = "cpu"

    def __init__(self):
        self.pools: list[FakePool] = []
        self.replays = 0
        self.released: list[str] = []   # "warmup" / "record": the work run with workspaces freed around it
        self._releasing = None

    @contextlib.contextmanager
    def workspaces_released(self):
        self._releasing = "warmup"
        try:
            yield
        finally:
            self.released.append(self._releasing)
            self._releasing = None

    def new_pool(self):
        pool = FakePool(len(self.pools))
        self.pools.append(pool)
        return pool

    def record(self, fn, args, pool, device):
        if pool.recordings and not pool.alive:
            # torch's caching allocator frees a pool once every graph in it is released, and
            # an assertion refuses a new capture into it
            raise RuntimeError("it->second->use_count > 0 INTERNAL ASSERT FAILED (a capture into a released pool)")
        if self._releasing is not None:
            self._releasing = "record"
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        copy_storages = {c.untyped_storage().data_ptr(): k for k, c in enumerate(copies)
                         if isinstance(c, torch.Tensor)}
        made = fn(list(copies))
        inputs = [_alias(a) if isinstance(a, torch.Tensor) else a for a in args]
        outputs = []
        for out in made:
            k = copy_storages.get(out.untyped_storage().data_ptr()) if isinstance(out, torch.Tensor) else None
            # an output that is an input's memory stays that input's memory
            outputs.append(out if k is None else inputs[k].as_strided(out.shape, out.stride(), out.storage_offset()))
        outputs = type(made)(outputs)
        pool.recordings += 1

        def replay():
            self.replays += 1
            for static, new in zip(outputs, fn(list(inputs))):
                if isinstance(static, torch.Tensor) and static.data_ptr() != new.data_ptr():
                    static.copy_(new)

        recording = Recording(outputs, replay)
        pool.alive += 1
        weakref.finalize(recording, _release, pool)
        return recording

    def invalidate(self, tensor, message):
        tensor._fake_stale = message


def stale_message(t: torch.Tensor) -> str | None:
    return getattr(t, "_fake_stale", None)


def executable_of(gm: torch.fx.GraphModule) -> Executable:
    """An Executable that runs ``gm``'s ATen ops as they are, describing its inputs,
    outputs and launches (one extern call per op) as generated modules do."""
    names = {}
    inputs = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            names[node] = node.name
            val = node.meta.get("val")
            inputs.append({"name": node.name, "shape": list(getattr(val, "shape", [])),
                           "stride": list(val.stride()) if isinstance(val, torch.Tensor) else [], "offset": 0,
                           "dtype": str(getattr(val, "dtype", "")).replace("torch.", "")})
    launches = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            names[node] = node.name
            reads = [names[a] for a in node.all_input_nodes if a in names]
            launches.append({"kind": "extern", "name": node.name, "op": str(node.target), "reads": reads})
    module = types.SimpleNamespace(INPUTS=inputs, OUTPUTS=[], LAUNCHES=launches, KERNELS={}, CPP_SOURCE="")
    saved_from = gm.meta.get("traced_layout_outputs_from")
    return Executable(boxed_graph_runner(gm), [], module, "", f"{gm.__class__.__name__}.py", "fake",
                      saved_outputs_from=saved_from)


def fake_backend(pool: GraphPool, made: list | None = None, symbolic: bool = False):
    """A backend for ``surge.compile``: surge's aot layer, each ATen graph an
    ``executable_of`` it wrapped for CUDA graphs in ``pool``; ``made`` collects the wrappers.
    ``symbolic``: it takes graphs of symbolic sizes and records them per size, as the
    kernel backends do; else the frontend compiles one graph per size."""

    def compiler(gm, example_inputs):
        executable = executable_of(gm)
        per_size = symbolic and has_symbolic_sizes(gm)
        wrapper = RecordedPerSize(executable, pool) if per_size else CudaGraphed(executable, pool)
        if made is not None:
            made.append(wrapper)
        return wrapper

    def backend(gm, example_inputs):
        return aot_compile(gm, example_inputs, fw_compiler=compiler, bw_compiler=compiler)

    backend.accepts_symbolic_sizes = symbolic
    return backend


def new_pool(max_records: int = 8) -> GraphPool:
    return GraphPool(FakeRecorder(), max_records, "f")
