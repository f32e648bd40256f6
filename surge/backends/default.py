"""surge's default backend: generated kernels for the device the graph runs on.

Graphs whose tensors live on a CUDA device go to the "triton" backend, all others
to the "cpp" backend. This is also ``surge.backend``, so
``torch.compile(f, backend=surge.backend)`` runs surge's backend behind Dynamo.
"""
from __future__ import annotations

import torch

from ..options import Options


def graph_device_type(example_inputs) -> str:
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            if value.device.type == "cuda":
                return "cuda"
    return "cpu"


def default_backend(gm: torch.fx.GraphModule, example_inputs: list, *, options: Options | None = None):
    """torch.compile backend protocol: ``default_backend(gm, example_inputs) -> callable``."""
    from . import lookup_backend

    name = "triton" if graph_device_type(example_inputs) == "cuda" else "cpp"
    return lookup_backend(name, options)(gm, example_inputs)   # each specializes symbolic graphs


def _before_capture(args: tuple) -> None:
    from .triton import start_compile_workers_early

    start_compile_workers_early(args)


default_backend.before_capture = _before_capture
# As the kernel backends it picks (frontend/dynamic_dims.py).
default_backend.accepts_symbolic_sizes = True
# Changing numbers arrive as 0-d tensors (frontend/number_tensors.py): lowering takes
# symbolic sizes, not symbolic scalars.
default_backend.accepts_symbolic_numbers = False
# Sizes with no hint (computed from data: nonzero, boolean masks) are not lowered.
default_backend.accepts_data_dependent_sizes = False
