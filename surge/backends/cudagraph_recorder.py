"""Recorders: what records a function's device work once and replays it (CUDA graphs).

``cudagraphs.py`` decides what is recorded, when, and what happens to inputs and
outputs; a recorder only does the device part. It has:

- ``device_type``: the tensors it records work on ("cuda");
- ``new_pool()``: a memory pool that several recordings share;
- ``record(fn, args, pool, device)``: run ``fn(list(args))`` (which launches the work and
  returns its outputs) under capture, allocating in ``pool``; returns a ``Recording``
  whose ``outputs`` are what ``fn`` returned (tensors in the pool) and whose ``replay()``
  runs the work again on the same memory (``args``' memory, read where it was);
- ``invalidate(tensor, message)``: make every later read of ``tensor``'s storage raise
  ``message`` (an output a later replay overwrote);
- ``workspaces_released()``: a context that frees, on entry and on exit, the scratch
  memory libraries keep per handle and stream (cuBLAS's workspaces), so that a warmup or
  a recording keeps none of its own.

``CudaRecorder`` is torch's CUDA graph API. It touches ``torch.cuda`` only when
recording, so CPU machines never import or initialize it; tests drive the same
decisions with a recorder that replays on the CPU (``tests/backend/cudagraph_fakes.py``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Callable

import torch


@dataclasses.dataclass
class Recording:
    outputs: object                 # what the recorded function returned, in the pool
    replay: Callable[[], None]      # runs the recorded work again on the current stream
    graph: object = None            # the recorder's own handle (a torch.cuda.CUDAGraph)


class CudaRecorder:
    """Records with ``torch.cuda.CUDAGraph`` on a side stream, in a private pool of the
    caching allocator (``torch.cuda.graph_pool_handle``)."""

    device_type = "cuda"

    def __init__(self):
        self._streams: dict = {}

    def new_pool(self):
        return torch.cuda.graph_pool_handle()

    def record(self, fn: Callable, args: list, pool, device: torch.device) -> Recording:
        with torch.cuda.device(device):
            stream = self._streams.get(device)
            if stream is None:
                stream = self._streams[device] = torch.cuda.Stream(device)
            current = torch.cuda.current_stream(device)
            # the side stream sees what the current stream wrote (static inputs, warmup)
            stream.wait_stream(current)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(stream):
                # thread_local: another thread's unrelated CUDA calls do not break the capture
                try:
                    graph.capture_begin(pool=pool, capture_error_mode="thread_local")
                except BaseException:
                    _restore_generators()   # it raised after putting them in capture mode
                    raise
                try:
                    outputs = fn(list(args))
                except BaseException:
                    _end_failed_capture(graph)
                    raise
                graph.capture_end()
            current.wait_stream(stream)
        return Recording(outputs, graph.replay, graph)

    def invalidate(self, tensor: torch.Tensor, message: str) -> None:
        """CUDA builds of torch only. Where torch has it, the storage itself raises, so
        views the user made of the output raise too; else the tensor does."""
        whole_storage = getattr(torch._C, "_set_storage_data_ptr_access_error_msg", None)
        try:
            if whole_storage is not None:
                whole_storage(tensor.untyped_storage()._cdata, message)
            else:
                torch._C._set_storage_access_error_msg(tensor, message)
        except RuntimeError:   # an output sharing its storage with one invalidated already
            pass


    @contextlib.contextmanager
    def workspaces_released(self):
        """cuBLAS's workspaces freed before and after the block (32 MB per handle and stream, kept for the process's
        life). The warmup makes them on the current stream (one per thread: the autograd
        thread has a handle of its own) and a capture its own on the side stream, in the
        pool: kept, they would double the mode's memory. Freeing a workspace a recording
        captured is safe: its memory returns to that recording's pool, where only later
        recordings of the pool can take it, and a replay already counts as overwriting
        the outputs of every later recording (``GraphPool.overwritten_by``)."""
        torch._C._cuda_clearCublasWorkspaces()
        try:
            yield
        finally:
            torch._C._cuda_clearCublasWorkspaces()


def _end_failed_capture(graph) -> None:
    """End a capture that raised: the stream leaves capture mode (the graph is invalid)."""
    try:
        graph.capture_end()
    except Exception:
        # The capture itself was invalidated (an operation a capture does not allow, a
        # synchronizing copy say): ending it raised before the generators left capture mode.
        _restore_generators()


def _restore_generators() -> None:
    """Take torch's CUDA random generators out of capture mode after a capture that failed
    half-way (else every later random op of the process raises "Offset increment outside
    graph capture"): an empty capture in a pool of its own begins and ends properly. A failed
    recording must not change the process's state."""
    empty = torch.cuda.CUDAGraph()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "the CUDA graph is empty": it is meant to be
        empty.capture_begin(pool=torch.cuda.graph_pool_handle(), capture_error_mode="thread_local")
        empty.capture_end()
