"""``Executable``: one compiled ATen graph, whichever target built it.

It is what the pipeline returns, what the compiled-graph cache stores (``artifact()``)
and what a mode wrapper (a CUDA graph recorder) wraps. Besides running, it describes
itself as plain data that its generated module carries (``codegen/launches.py``): its
inputs and outputs with their layouts and the ordered list of its launches (generated
kernels and ATen calls).
"""
from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass
class Executable:
    """A compiled ATen graph: call it with the graph's inputs."""
    call: Callable                # call(args: list) -> outputs; empties ``args``
    constants: list               # tensors the graph reads besides its inputs (appended to them)
    module: object                # the generated module (kernels' metadata, host code, tables)
    source: str                   # the module's text
    path: str                     # where that text is stored (the code cache)
    target: str                   # the Target's name: "triton" or "cpp"
    schedule: object = None       # None when the module came from a cache
    cache_hit: bool = False       # the module came from the code cache (or the graph cache)
    compile_seconds: float = 0.0
    launchers: dict = dataclasses.field(default_factory=dict)   # Triton: call-site name -> launcher
    library_source: str = ""      # C++: the whole library this graph's kernels are in
    compiled: bool = False        # C++: the compiler ran for this graph
    warmer: Callable | None = None   # compiles what is not compiled yet
    warm: bool = False
    # A training forward's outputs from this position on are saved for the backward
    # (not handed to the user); None for other graphs.
    saved_outputs_from: int | None = None

    def __call__(self, *args):
        return self.call_boxed(list(args))

    def call_boxed(self, args: list):
        """Run on ``args``, emptying the list: each input is dropped after its last use."""
        if self.constants:
            args.extend(self.constants)
        return self.call(args)

    def warmup(self) -> "Executable":
        """Compile, load and bind everything before the first real call, so that it (and a
        CUDA graph recording it) compiles and binds nothing: every Triton launcher picks its
        config, binds its grid and, on a GPU, has its binary (compiled by the workers, or
        now) and its direct launch (``runtime/launcher.py``: ``bind``); a symbolic kernel
        binds for the example sizes. A C++ library is built and loaded at compile time.
        A kernel whose config is to be autotuned still binds at its first launch, which
        times the candidates on that call's arguments."""
        if not self.warm:
            if self.warmer is not None:
                self.warmer()
            self.warm = True
        return self

    def artifact(self) -> dict:
        """What the compiled-graph cache stores to rebuild this executable
        (``pipeline.load_artifact``): plain data, the same for every target."""
        return {"target": self.target, "source": self.source, "path": self.path,
                "constants": list(self.constants), "library_source": self.library_source,
                "saved_outputs_from": self.saved_outputs_from}

    @property
    def inputs(self) -> list:
        """Each input's name, shape, stride, offset and dtype (constants come last)."""
        return self.module.INPUTS

    @property
    def outputs(self) -> list:
        """Each output's buffer and layout, or ``{"value": ...}`` for a non-tensor output."""
        return self.module.OUTPUTS

    @property
    def launches(self) -> list:
        """The kernels and ATen calls in the order a call runs them (``codegen/launches.py``)."""
        return self.module.LAUNCHES

    @property
    def memory(self) -> dict:
        """The static memory plan: the arena's size, alignment and each buffer's slot in it
        (``codegen/launches.memory_table``)."""
        return self.module.MEMORY

    @property
    def kernel_names(self) -> list:
        return list(self.module.KERNELS)

    @property
    def cpp_source(self) -> str:
        return self.module.CPP_SOURCE

    def describe_launches(self) -> str:
        """``launches.txt`` of the debug dir: one line per input, launch and output."""
        lines = [f"input {e['name']}: {e['dtype']}{e['shape']} stride={e['stride']} offset={e['offset']}"
                 for e in self.inputs]
        for e in self.launches:
            reads = ", ".join(e["reads"])
            if e["kind"] == "extern":
                lines.append(f"extern {e['op']}({reads}) -> {e['name']}")
            else:
                where = f" [{e['segment']}]" if "segment" in e else ""
                into = e.get("into", {})
                writes = ", ".join(w + (f" (into {into[w]})" if w in into else "") for w in e["writes"])
                lines.append(f"kernel {e['name']}{where}({reads}) -> {writes}")
        memory = self.memory
        if memory["slots"]:
            lines.append(f"arena {memory['arena_bytes']} bytes, aligned to {memory['alignment']}: " + ", ".join(
                f"{name} at {offset} (+{nbytes})" for name, (offset, nbytes) in memory["slots"].items()))
        lines += [f"output {e['name']}: {e['dtype']}{e['shape']} stride={e['stride']}" if "name" in e
                  else f"output {e['value']}" for e in self.outputs]
        return "\n".join(lines) + "\n"
