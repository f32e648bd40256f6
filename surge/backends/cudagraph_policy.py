"""Whether an ``Executable`` may be recorded into a CUDA graph, and how its inputs are read.

A recorded graph replays the same launches on the same memory, with no Python in
between. That is only what the Executable computes when:

- every tensor it reads is on the recorder's device (one device): work on CPU
  tensors is not recorded, so a replay would skip it (a one-element CPU constant of the
  graph may be read: its value is the same at every call);
- no launch synchronizes with the host or sizes its result by the data (``item``,
  ``nonzero``, ``masked_select``, ``unique``...): a capture cannot wait for the device,
  and a replay cannot change a result's size;
- every input it updates in place is read in place: an input copied into a static
  buffer before each replay would see the update in the buffer, not in the user's tensor.

The launch table shows the ATen calls, not what they do inside nor the devices of the
tensors they make; so the recording itself runs under ``RecordingWatch``, which sees
every ATen call the host code makes and the devices of its tensors.

The reasons are plain text: ``cudagraphs.py`` logs them on the ``cudagraphs`` channel
and runs such graphs in the default mode.
"""
from __future__ import annotations

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

# ATen ops (overload packets) that wait for the device or size their result by its data.
HOST_SYNC_OPS = frozenset({
    "aten._local_scalar_dense", "aten.item", "aten.nonzero", "aten.argwhere", "aten.masked_select",
    "aten.unique", "aten._unique", "aten._unique2", "aten.unique_consecutive", "aten.unique_dim",
    "aten.is_nonzero", "aten.equal", "aten.allclose", "aten.bincount", "aten.histc",
    "aten.repeat_interleave", "aten.nonzero_numpy", "aten.tolist", "aten._assert_scalar",
    "aten.index_put_with_sort", "aten._ctc_loss", "aten.segment_reduce",
})


def packet(op_name: str) -> str:
    """``aten.nonzero.default`` -> ``aten.nonzero``."""
    parts = op_name.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else op_name


def host_sync_launches(launches: list) -> list[str]:
    return [e["op"] for e in launches if e["kind"] == "extern" and packet(e["op"]) in HOST_SYNC_OPS]


def mutated_inputs(executable) -> set[int]:
    """Positions of the inputs that a call writes: a kernel that stores into one, or an
    ATen call that updates its first argument in place (``copy_``, ``add_``, ``index_put_``)."""
    names = {entry["name"]: k for k, entry in enumerate(executable.inputs)}
    written = set()
    for entry in executable.launches:
        if entry["kind"] == "kernel":
            written.update(names[w] for w in entry["writes"] + list(entry.get("into", {}).values()) if w in names)
        elif entry["reads"] and _updates_in_place(entry["op"]):
            # a foreach update writes a whole list: every input it reads may be written
            targets = entry["reads"] if packet(entry["op"]).startswith("aten._foreach") else entry["reads"][:1]
            written.update(names[r] for r in targets if r in names)
    return written


def _updates_in_place(op_name: str) -> bool:
    parts = op_name.split(".")
    name = parts[1] if len(parts) > 1 else op_name
    overload = parts[2] if len(parts) > 2 else ""
    return (name.endswith("_") and not name.endswith("__")) or overload == "out" or overload.endswith("_out")


def device_problem(tensors: list, device_type: str) -> str | None:
    """Why ``tensors`` (inputs, constants or outputs) cannot be in one recording, or None."""
    devices = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if not devices:
        return None
    others = sorted(str(d) for d in devices if d.type != device_type)
    if others:
        return f"it reads or returns tensors on {', '.join(others)} (recorded work runs on {device_type} only)"
    if len(devices) > 1:
        return f"its tensors are on several devices ({', '.join(sorted(map(str, devices)))})"
    return None


def frozen_constant(value) -> bool:
    """A one-element CPU constant of the graph (a literal ``torch.tensor(0.5)``): an op reads
    its value when it is recorded, and it never changes, so the recording may keep it."""
    return isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.numel() == 1


def why_not_recorded(executable, inputs: list, copied: set[int], device_type: str) -> str | None:
    """The reason ``executable`` cannot be recorded for a call on ``inputs`` whose positions
    ``copied`` would be copied into static buffers, or None when it can."""
    constants = [c for c in executable.constants if not frozen_constant(c)]
    problem = device_problem(list(inputs) + constants, device_type)
    if problem:
        return problem
    syncing = host_sync_launches(executable.launches)
    if syncing:
        return f"it calls {', '.join(sorted(set(syncing)))}, which synchronize with the host or size results by data"
    written = sorted(mutated_inputs(executable) & copied)
    if written:
        names = ", ".join(executable.inputs[k]["name"] for k in written)
        return (f"it updates input(s) {names} in place, which are not static (their memory moves between "
                "calls, so a replay would update a copy)")
    return None


class RecordingWatch(TorchDispatchMode):
    """Notes, while a recording runs, every ATen call that a replay would not repeat as
    it ran: one on or making tensors off the recorder's device (CPU work, whose values the
    recording would freeze), or one that synchronizes with the host."""

    def __init__(self, device_type: str, constants: list = ()):
        super().__init__()
        self.device_type = device_type
        self.problems: list[str] = []
        # the graph's frozen constants (``frozen_constant``), by the memory they are in
        self.frozen = {c.untyped_storage().data_ptr() for c in constants if frozen_constant(c)}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func)
        if packet(name) in HOST_SYNC_OPS:
            self._note(f"it calls {name}, which synchronizes with the host or sizes results by data")
        bookkeeping = _keeps_rng_state_on_host(name)
        read = pytree.tree_leaves((args, kwargs))
        for k, value in enumerate(read + pytree.tree_leaves(out)):
            if (isinstance(value, torch.Tensor) and value.device.type != self.device_type
                    and not (bookkeeping and value.dtype in _RNG_STATE_DTYPES)
                    and not (k < len(read) and value.untyped_storage().data_ptr() in self.frozen)):
                self._note(f"{name} runs on {value.device} tensors (recorded work runs on {self.device_type} only)")
                break
        return out

    def _note(self, problem: str) -> None:
        if problem not in self.problems:
            self.problems.append(problem)


# Fused attention returns (and its backward takes) its dropout RNG's seed and offset as
# int64 tensors: on the host when it draws nothing (dropout 0; what it returns then is
# never read), on the device while a CUDA graph is recorded otherwise. They are not work.
_RNG_STATE_DTYPES = (torch.int64, torch.uint64)


def _keeps_rng_state_on_host(op_name: str) -> bool:
    name = packet(op_name).split(".", 1)[-1]
    return "attention" in name and name.startswith("_")
