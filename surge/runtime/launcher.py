"""Kernel launchers: pick a config on the first call (autotuning when asked), then launch with it.

``make_launcher`` returns a plain function ``launch(*pointer_args)`` that the
generated wrapper calls; sizes, grid and config are bound in its closure.
"""
from __future__ import annotations

import functools
import operator
import time
from collections import Counter

from .. import logs
from ..counters import counters
from ..observe.phases import phase_timer
from . import autotune, binary_cache, compile_pool
from .triton_mode import asserting_in_interpreter, interpreting

INT32_MAX = 2**31 - 1


def _binary_key(meta: dict, config: dict, args) -> str | None:
    """The binary-cache key of this launch, or None when its binary is not one to store
    (a pointer not 16-byte aligned: Triton specialized on it)."""
    import torch

    if not all(isinstance(a, torch.Tensor) and a.data_ptr() % 16 == 0 for a in args):
        return None
    return binary_cache.record_key(meta, config, torch.cuda.get_device_name())


def _timing_args(args) -> list:
    """The arguments to time configs on. A kernel that writes its output over a buffer it
    reads (the memory plan's in place reuse) would read its own results from the second
    run on: arguments sharing storage are timed on one copy of that storage."""
    import torch

    counts = Counter(a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor))
    if max(counts.values(), default=1) == 1:
        return list(args)
    copies = {}
    out = []
    for a in args:
        key = a.untyped_storage().data_ptr() if isinstance(a, torch.Tensor) else None
        if key is None or counts[key] == 1:
            out.append(a)
            continue
        if key not in copies:
            copies[key] = a.untyped_storage().clone()
        out.append(torch.empty(0, dtype=a.dtype, device=a.device).set_(copies[key], a.storage_offset(),
                                                                       a.size(), a.stride()))
    return out


def _alignment(args) -> tuple | None:
    """Whether each pointer argument is 16-byte aligned (Triton specializes a binary on it);
    None when an argument is no tensor."""
    import torch

    if not all(isinstance(a, (torch.Tensor, _Address)) for a in args):
        return None
    return tuple(a.data_ptr() % 16 == 0 for a in args)


def _pointer_dtypes(meta: dict) -> list:
    """The torch dtypes of a kernel's pointer arguments, from its signature: what Triton's
    ``warmup`` takes in place of tensors, specializing every pointer as 16-byte aligned."""
    from ..codegen.triton.ops import POINTER_TYPES

    dtype_of = {ptr: dtype for dtype, ptr in POINTER_TYPES.items()}
    return [dtype_of[t] for t in meta["signature"].values() if t.startswith("*")]


def _load_on_device(compiled) -> None:
    """Load a binary that Triton's ``warmup`` returned onto the GPU now (a launch does it
    on first use): its direct launch needs its function handle."""
    init = getattr(compiled, "_init_handles", None)
    if init is not None:
        init()


def _grid(meta: dict, config: dict) -> tuple:
    xblock = config["XBLOCK"]
    return ((meta["xnumel"] + xblock - 1) // xblock,)


def make_launcher(kernel, name: str, meta: dict, source: str, cache_dir: str, tune: bool = False):
    if meta.get("symbolic"):
        return asserting_in_interpreter(make_symbolic_launcher(kernel, name, meta, source, cache_dir, tune), meta)
    interpret = interpreting()
    configs = autotune.candidate_configs(meta, interpret)
    sizes = (meta["xnumel"], meta["rnumel"]) if meta["reduction"] else (meta["xnumel"],)
    addresses = _addresses(meta)
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
        if args is None:   # tuning times the candidates on a launch's own arguments
            return None
        start = time.perf_counter()
        timing_args = _timing_args(args)
        best, timings = autotune.benchmark(lambda c: run(timing_args, c), configs)
        autotune.store_choice(cache_dir, key, best, timings)
        logs.log("perf", f"autotuned {name} in {time.perf_counter() - start:.2f} s: {best} from "
                         f"{len(configs)} configs ({', '.join(f'{t:.4f}' for t in timings)} ms)")
        return best

    def bind() -> bool:
        """What the first launch does before it runs, done ahead (``Executable.warmup``): pick
        the config, bind the grid and, on a GPU, load the stored binary or compile it, with
        every pointer specialized as 16-byte aligned (the arena's views and torch's
        allocations are), and make its direct launch; the first launch then only runs it
        (an unaligned pointer still goes through Triton). False, binding nothing, when the
        config is to be tuned: tuning times the candidates on the first launch's arguments."""
        if "config" in state:
            return True
        if not interpret:
            compile_pool.finish_pending()   # this kernel may be one a worker is compiling
        config = choose(None)
        if config is None:
            return False
        counters["kernel_bindings"] += 1
        state["grid"] = _grid(meta, config)
        state["bound"] = kernel[state["grid"]]
        if not interpret:
            import torch

            dtypes = _pointer_dtypes(meta)
            key = binary_cache.record_key(meta, config, torch.cuda.get_device_name())
            compiled = binary_cache.load(cache_dir, key, kernel)
            fresh = compiled is None
            if fresh:
                compiled = kernel.warmup(*dtypes, *sizes, grid=state["grid"], **config)
            _load_on_device(compiled)
            state["direct"] = direct_launch(kernel, compiled, state["grid"], (True,) * len(dtypes), sizes, config,
                                            addresses)
            if fresh and state["direct"] is not None:
                binary_cache.store(cache_dir, key, compiled)
        state["config"] = config
        return True

    def first_launch(args):
        if not interpret:
            compile_pool.finish_pending()   # this kernel may be one a worker is compiling
        counters["kernel_bindings"] += 1
        config = state["config"] = choose(args)
        state["grid"] = _grid(meta, config)
        state["bound"] = kernel[state["grid"]]
        if interpret:
            state["bound"](*args, *sizes, **config)
            return
        key = _binary_key(meta, config, args)
        if key is not None and _launch_stored_binary(key, args, config):
            return
        compiled = state["bound"](*args, *sizes, **config)
        state["direct"] = direct_launch(kernel, compiled, state["grid"], _alignment(args), sizes, config)
        if key is not None and state["direct"] is not None:
            binary_cache.store(cache_dir, key, compiled)

    def _launch_stored_binary(key, args, config) -> bool:
        """Launch a binary a former process stored, without Triton's compiler (binary_cache)."""
        compiled = binary_cache.load(cache_dir, key, kernel)
        direct = direct_launch(kernel, compiled, state["grid"], _alignment(args), sizes, config) if compiled else None
        try:
            if direct is None or not direct(args):
                return False
        except (TypeError, ValueError) as error:
            logs.log("perf", f"stored binary of {name} refused ({error}); compiling through Triton")
            return False
        state["direct"] = direct
        return True

    def launch(*args):
        config = state.get("config")
        if config is None:
            if interpret:  # nothing is compiled: the first launch is only the (slow) run
                return first_launch(args)
            # Triton compiles a kernel on its first launch, after the graph's compile has
            # ended: a compile record of its own (autotuning nests inside it). A kernel given
            # addresses binds as warmup does: Triton's first launch would specialize on them.
            with phase_timer.compile(f"first launch of {name}"), phase_timer.phase("kernel_compile"):
                if not (addresses and bind()):
                    return first_launch(args)
            config = state["config"]
        direct = state.get("direct")
        if direct is not None:
            try:
                if direct(args):
                    return
            except (TypeError, ValueError) as error:  # the binary's launcher refused our arguments
                state["direct"] = None
                logs.log("perf", f"direct launch of {name} refused ({error}); launching through Triton")
        state["bound"](*_for_triton(args, addresses), *sizes, **config)

    launch.configs = configs
    launch.bind = bind
    launch.state = state
    launch.kernel = kernel
    launch.meta = meta
    return asserting_in_interpreter(launch, meta)


class _Address:
    """A pointer argument the host code passes as an integer (an arena slot's address:
    ``codegen/wrapper.py``), where Triton's own launch path wants a tensor: what Triton
    reads of one (its dtype and data pointer), as Triton's ``MockTensor`` offers them."""

    __slots__ = ("address", "dtype")

    def __init__(self, address: int, dtype):
        self.address, self.dtype = address, dtype

    def data_ptr(self) -> int:
        return self.address


def _addresses(meta: dict) -> dict:
    """Pointer position -> torch dtype of the pointer arguments passed as integers."""
    positions = meta.get("addresses")
    if not positions:
        return {}
    dtypes = _pointer_dtypes(meta)
    return {k: dtypes[k] for k in positions}


def _for_triton(args: tuple, addresses: dict) -> tuple:
    """``args`` for Triton's own launch: each integer address as a pointer of its dtype."""
    if not addresses:
        return args
    return tuple(_Address(a, addresses[k]) if k in addresses else a for k, a in enumerate(args))


def _no_hook(hook) -> bool:
    """No launch hook installed: None, or (newer Triton) an empty chain of hooks."""
    return hook is None or (type(hook).__name__ == "HookChain" and not hook.calls)


def _no_hooks(runtime_knobs) -> bool:
    return _no_hook(runtime_knobs.launch_enter_hook) and _no_hook(runtime_knobs.launch_exit_hook)


def _c_launch(run):
    """(the C launch function, its arguments between the function handle and the kernel's
    own) of a launcher laid out as Triton 3.6's ``CudaLauncher``; None for any other layout,
    or a kernel that needs scratch memory allocated per launch (``run`` does that)."""
    fields = ("launch", "global_scratch_size", "profile_scratch_size", "launch_cooperative_grid", "launch_pdl")
    if not all(hasattr(run, f) for f in fields) or hasattr(run, "arg_annotations") or getattr(run, "gsan_enabled", 0):
        return None
    if run.global_scratch_size or run.profile_scratch_size:
        return None
    # cooperative grid, programmatic dependent launch, no global and no profile scratch
    return run.launch, (run.launch_cooperative_grid, run.launch_pdl, None, None)


def direct_launch(kernel, compiled, grid: tuple, aligned: tuple | None, sizes: tuple, config: dict,
                  addresses: dict | None = None):
    """A launch of the compiled binary that skips Triton's per-call argument binding.

    ``kernel[grid](...)`` re-derives the specialization key from every argument on each
    call (tens of microseconds, a large part of a small graph's time). Our arguments
    keep their types from call to call (the graph's guards fix dtypes and devices, sizes
    are bound here), so the one thing that can change is the 16-byte alignment Triton
    specialized each pointer on (``aligned``, per pointer; None: not all tensors): the
    returned function checks exactly that and returns False (the caller then goes
    through Triton) when it differs, or when a launch hook (a profiler's, say) is
    installed. None when this Triton's launch interface is not the one we know.

    The pointers go to the binary's C launcher as the integers the alignment check read
    (a tensor there costs another ``data_ptr()`` call and a ``cuPointerGetAttribute``
    each), and with Triton 3.6's launcher (``_c_launch``) straight to its C function: no
    Python ``__call__`` and scratch-allocation closures per launch. Pointer positions in
    ``addresses`` are integers already.
    """
    try:
        from triton import knobs
        from triton.runtime.driver import driver
    except ImportError:
        return None
    import torch

    names = getattr(kernel, "arg_names", None)
    if (compiled is None or getattr(kernel, "used_global_vals", None) or names is None
            or not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata"))):
        return None
    if aligned is None:
        return None
    given = len(aligned) + len(sizes)
    if any(n not in config for n in names[given:]) or len(names) < given:
        return None
    runtime_knobs = knobs.runtime
    # The hook chains the knobs hold now, and their lists of hooks (which adding a hook
    # fills in place): while both are the same and empty no hook is installed; a knob
    # that is no chain (older Triton: None or a function) is checked as it is.
    enter, leave = runtime_knobs.launch_enter_hook, runtime_knobs.launch_exit_hook
    enter_calls, leave_calls = getattr(enter, "calls", (None,)), getattr(leave, "calls", (None,))
    data_ptr = torch.Tensor.data_ptr   # the C method itself, mapped over the arguments
    # per pointer, what reads its address: int() of an integer is itself
    readers = tuple(int if k in (addresses or ()) else data_ptr for k in range(len(aligned)))
    tail = (*sizes, *(config[n] for n in names[given:]))
    grid_xyz = (*grid, 1, 1)[:3]
    c_launch = _c_launch(compiled.run)
    if c_launch is not None:
        launch, fixed = c_launch
        between = (compiled.function, *fixed, compiled.packed_metadata, None, None, None)   # no metadata, no hooks
    else:   # the launcher's own call, same arguments but for the scratch it allocates itself
        launch, between = compiled.run, (compiled.function, compiled.packed_metadata, None, None, None)
    current_device, current_stream = driver.active.get_current_device, driver.active.get_current_stream
    if current_device is torch.cuda.current_device and hasattr(torch._C, "_cuda_getDevice"):
        # CUDA is initialised once a kernel has run: skip current_device's lazy-init checks
        # (a few microseconds per launch, dozens of launches per call)
        current_device = torch._C._cuda_getDevice
    all_aligned = all(aligned)

    # a kernel of symbolic sizes passes each call's grid and size arguments: its binary
    # serves every size (the sizes it could specialize on are not specialized)
    def direct(args, grid_xyz=grid_xyz, tail=tail) -> bool:
        if not (runtime_knobs.launch_enter_hook is enter and runtime_knobs.launch_exit_hook is leave
                and not enter_calls and not leave_calls) and not _no_hooks(runtime_knobs):
            return False   # hooks need the launch metadata Triton builds (a profiler's): Triton launches
        pointers = tuple(map(operator.call, readers, args)) if addresses else tuple(map(data_ptr, args))
        if all_aligned:
            if functools.reduce(operator.or_, pointers, 0) & 15:
                return False
        elif tuple(p % 16 == 0 for p in pointers) != aligned:
            return False
        launch(*grid_xyz, current_stream(current_device()), *between, *pointers, *tail)
        return True

    direct.calls_c_launch = c_launch is not None   # which way it launches (tests, bench/gpu_call_overhead.py)
    return direct


def make_symbolic_launcher(kernel, name: str, meta: dict, source: str, cache_dir: str, tune: bool = False):
    """The launcher of a kernel whose sizes are arguments: the host code passes the size
    symbols, then xnumel (and rnumel), after the pointers. The grid and the config follow
    each call's numbers: a config is picked once per distinct (xnumel, rnumel), from the
    candidates for those numbers (a tuned choice stored for them, else the default), so a
    persistent reduction's RBLOCK always covers its row. The generated kernel does not let
    Triton specialize on the sizes that vary in kind (``codegen/triton/kernel.py``), so
    one binary per config (and integer width) serves every size: it is compiled once and
    launched directly (``direct_launch``) with each call's grid and sizes; a new size costs
    a config lookup, not a pass through Triton's launcher."""
    interpret = interpreting()
    numels = 2 if meta["reduction"] else 1
    pointers = sum(1 for t in meta["signature"].values() if t.startswith("*"))
    addresses = _addresses(meta)
    names = getattr(kernel, "arg_names", None) or ()
    config_names = names[pointers + len(meta["size_hints"]):]
    configs: dict = {}    # (xnumel, rnumel) -> (grid, config)
    binaries: dict = {}   # (config, which sizes need 64 bits) -> direct launch, or None
    launches: dict = {}   # all size arguments -> (grid, config, direct launch or None, its grid and tail)

    def pick(args, key) -> tuple | None:
        sized = dict(meta, xnumel=key[0], rnumel=key[1] if meta["reduction"] else 1)
        candidates = autotune.candidate_configs(sized, interpret)
        config = candidates[0]
        if not interpret and len(candidates) > 1:
            import torch
            tuning = autotune.tuning_key(source, sized, torch.cuda.get_device_name())
            found = autotune.load_choice(cache_dir, tuning)
            if found is not None:
                config = found["config"]
            elif tune:
                if args is None:   # tuning times the candidates on a launch's own arguments
                    return None
                timing_args = _timing_args(args)
                config, timings = autotune.benchmark(
                    lambda c: kernel[_grid(sized, c)](*timing_args, **c), candidates)
                autotune.store_choice(cache_dir, tuning, config, timings)
                logs.log("perf", f"autotuned {name} for sizes {key}: {config}")
        return _grid(sized, config), config

    def binary(grid, config, sizes):
        """The direct launch of the binary for ``config``, compiled (or loaded from
        Triton's cache) the first time: Triton types an integer argument by its value."""
        key = (tuple(sorted(config.items())), tuple(s > INT32_MAX for s in sizes))
        if key not in binaries:
            compile_pool.finish_pending()   # this kernel may be one a worker is compiling
            dtypes = _pointer_dtypes(meta)
            compiled = kernel.warmup(*dtypes, *sizes, grid=grid, **config)
            _load_on_device(compiled)
            binaries[key] = direct_launch(kernel, compiled, grid, (True,) * len(dtypes), sizes, config, addresses)
        return binaries[key]

    def sized_launch(args, sizes) -> tuple | None:
        """What a launch with these sizes needs, made once per distinct sizes (None: the
        config is to be tuned on this launch's arguments and ``args`` is None)."""
        key = sizes[-numels:]
        found = configs.get(key)
        if found is None:
            if not interpret:
                compile_pool.finish_pending()
            found = pick(args, key)
            if found is None:
                return None
            configs[key] = found
        grid, config = found
        counters["kernel_bindings"] += 1
        direct = None if interpret else binary(grid, config, sizes)
        launches[sizes] = entry = (grid, config, direct, (*grid, 1, 1)[:3],
                                   (*sizes, *(config[n] for n in config_names)))
        return entry

    def bind() -> bool:
        """``make_launcher``'s ``bind`` for the sizes of the example inputs (``size_hints``):
        the binary every size launches is ready before the first call."""
        sizes = tuple(meta["size_hints"])
        return sizes in launches or sized_launch(None, sizes) is not None

    def launch(*args):
        sizes = args[pointers:]
        found = launches.get(sizes) or sized_launch(args, sizes)
        grid, config, direct, grid_xyz, tail = found
        if direct is not None:
            try:
                if direct(args[:pointers], grid_xyz, tail):
                    return
            except (TypeError, ValueError, OverflowError) as error:   # the binary's launcher refused our arguments
                launches[sizes] = (grid, config, None, grid_xyz, tail)
                logs.log("perf", f"direct launch of {name} refused ({error}); launching through Triton")
        kernel[grid](*_for_triton(args, addresses), **config)

    launch.configs = []
    launch.bind = bind
    launch.binaries = binaries
    launch.launches = launches
    launch.state = configs
    launch.kernel = kernel
    launch.meta = meta
    return launch
