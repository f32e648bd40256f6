"""Kernel launchers: pick a config on the first call (autotuning when asked), then launch with it.

``make_launcher`` returns a plain function ``launch(*pointer_args)`` that the
generated wrapper calls; sizes, grid and config are bound in its closure.
"""
from __future__ import annotations

import time

from .. import logs
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

    def launch(*args):
        config = state.get("config")
        if config is None:
            config = state["config"] = choose(args)
            state["grid"] = _grid(meta, config)
            state["bound"] = kernel[state["grid"]]
        state["bound"](*args, *sizes, **config)

    launch.configs = configs
    launch.state = state
    launch.kernel = kernel
    launch.meta = meta
    return launch
