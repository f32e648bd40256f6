"""The "aot_eager" backend: surge's aot layer, with graphs run as they are (no codegen)."""
from __future__ import annotations

import torch

from .. import fallbacks
from ..errors import Unsupported
from ..options import Options
from .boxed import boxed_graph_runner
from .compile import aot_compile


def run_graph(aten_gm: torch.fx.GraphModule, example_inputs):
    """The compiler aot_eager uses for both graphs: run the ATen graph as it is
    (boxed, so that the backward frees saved tensors as it goes)."""
    return boxed_graph_runner(aten_gm)


def aot_eager_backend(gm: torch.fx.GraphModule, example_inputs, *, options: Options | None = None):
    options = options or Options.from_env()
    try:
        return aot_compile(gm, example_inputs, fw_compiler=run_graph, bw_compiler=run_graph, options=options)
    except Unsupported as e:
        if options.raise_internal_errors or options.fullgraph:
            raise
        # The aot layer cannot handle this graph: run the torch-level graph eagerly.
        fallbacks.announce(f"the aot layer cannot trace it: {e}", graph=True, options=options)
        return gm.forward


# Its graphs run as traced: symbolic sizes are inputs like any other (aot/symbolic_inputs.py).
aot_eager_backend.accepts_symbolic_sizes = True
# Values read back from tensors arrive as 0-d tensors (frontend/number_tensors.py).
aot_eager_backend.accepts_scalar_reads = False
