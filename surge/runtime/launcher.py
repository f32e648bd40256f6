"""Kernel launchers: pick a config on the first call (autotuning when asked), then launch with it.

``make_launcher`` returns a plain function ``launch(*pointer_args)`` that the
generated wrapper calls; sizes, grid and config are bound in its closure.
"""
from __future__ import annotations

import time

from .. import logs
from ..tools.phases import phase_timer
from . import autotune
from .triton_mode import interpreting


def _grid(meta: dict, config: dict) -> tuple:
    xblock = config["XBLOCK"]
    return ((meta["xnumel"] + xblock - 1) // xblock,)


def make_launcher(kernel, name: str, meta: dict, source: str, cache_dir: str, tune: bool = False):
    interpret = interpreting()
    configs = autotune.candidate_configs(meta, interpret)
    sizes = (meta["xnumel"], meta["rnumel"]) if meta["reduction"] else (meta["xnumel"],)
    state = {}

    def run(args, config):
        kernel[_grid(meta, config)](*args, *sizes, **config)

    def choose(args):
        if interpret or len(configs) == 1:
            return configs[0]
        import torch
        key = autotune.tuning_key(source, meta, torch.cuda.get_device_name())
        found = autotune.load_choice(cache_dir, key)
        if found is not None:
            return found["config"]
        if not tune:
            return configs[0]
        start = time.perf_counter()
        best, timings = autotune.benchmark(lambda c: run(args, c), configs)
        autotune.store_choice(cache_dir, key, best, timings)
        logs.log("perf", f"autotuned {name} in {time.perf_counter() - start:.2f} s: {best} from "
                         f"{len(configs)} configs ({', '.join(f'{t:.4f}' for t in timings)} ms)")
        return best

    def first_launch(args):
        config = state["config"] = choose(args)
        state["grid"] = _grid(meta, config)
        state["bound"] = kernel[state["grid"]]
        state["bound"](*args, *sizes, **config)

    def launch(*args):
        config = state.get("config")
        if config is None:
            if interpret:  # nothing is compiled: the first launch is only the (slow) run
                return first_launch(args)
            # Triton compiles a kernel on its first launch, after the graph's compile has
            # ended: a compile record of its own (autotuning nests inside it).
            with phase_timer.compile(f"first launch of {name}"), phase_timer.phase("kernel_compile"):
                return first_launch(args)
        state["bound"](*args, *sizes, **config)

    launch.configs = configs
    launch.state = state
    launch.kernel = kernel
    launch.meta = meta
    return launch
