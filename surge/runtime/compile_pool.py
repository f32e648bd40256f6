"""Compile kernels in parallel before their first launch.

Triton compiles a kernel when it is first launched, in the calling process, one
after another, so a model's cold first call waits for every kernel in turn.
Compiling holds the GIL for most of its time (two threads compiling sm_90
kernels took longer than one), so the pool uses worker processes, as other
compilers do: started when a fresh graph's kernels are generated
(``start_workers``), reused for the life of the process, at most one fewer than
the CPUs because the calling thread compiles too, and one per three kernels
(a worker takes as long to start as a few compiles). A worker imports
``surge.runtime`` and Triton only (not torch, whose import takes seconds;
nothing of the user's program) and talks pickles over its stdin and stdout.

A job is what a kernel's first launch will compile: a kernel file's function,
its pointer dtypes, sizes and launch config. The worker runs Triton's own
``warmup`` of that function with those arguments under a stand-in driver that
names the target GPU without using it, so Triton derives the same
specialization, options and cache key as the real launch and leaves the binary
in its on-disk cache, where the launch finds it; it also builds the kernel's
launcher (Triton compiles one per signature with the C compiler, ~0.3 s each,
on a kernel's first launch). The calling thread takes jobs
from the same queue and compiles them in process, so a batch is never slower
than compiling serially; with no workers (none could start,
``SURGE_COMPILE_WORKERS=0``, one CPU) it is exactly that, except that the
launchers of the kernels it compiles are built in threads beside its next
compiles. A job that fails is left to its launch, which compiles it and reports
any error as before.

``submit`` queues a graph's jobs and returns; the first launch of any kernel
calls ``finish_pending``, which compiles what is still queued and waits for the
rest, so a training graph's backward is lowered while its forward's kernels compile.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import pickle
import queue
import subprocess
import sys
import threading
import time

from .. import logs

JOB_TIMEOUT_S = 600.0
JOBS_PER_WORKER = 3


def pool_size(configured: int | None = None) -> int:
    """Worker processes at most: ``configured`` (``Options.compile_workers``,
    ``SURGE_COMPILE_WORKERS``), else one fewer than the CPUs."""
    if configured is not None:
        return max(0, configured)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(cpus, 32) - 1)


@dataclasses.dataclass
class KernelJob:
    path: str                 # the kernel file
    function: str
    arg_dtypes: tuple         # torch dtype names of the pointer arguments, in order
    sizes: tuple              # xnumel (, rnumel)
    config: dict              # XBLOCK (, RBLOCK), num_warps, num_stages
    target: tuple | None = None   # ("cuda", arch, warp size); None: this process's GPU
    worker_target: tuple | None = None   # ``target``, or this process's GPU's named for a worker
    error: str | None = None
    seconds: float = 0.0
    where: str = ""           # "process" or "worker"
    done: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False)

    def key(self) -> tuple:
        """Jobs with equal keys compile the same binary: Triton specializes an integer
        argument only on being 1, a multiple of 16 or past 32 bits, not on its value."""
        sizes = tuple((s == 1, s % 16 == 0, s >= 2**31) for s in self.sizes)
        return (os.path.basename(self.path), self.function, self.arg_dtypes, sizes,
                tuple(sorted(self.config.items())), self.target)

    def message(self, for_worker: bool = False) -> dict:
        """What ``compile_job`` needs; a worker never touches the GPU, so it gets the target by name."""
        return dict(path=self.path, function=self.function, arg_dtypes=self.arg_dtypes, sizes=self.sizes,
                    config=self.config, target=(self.worker_target or self.target) if for_worker else self.target)

    def finish(self, error, seconds: float, where: str) -> None:
        """The first to finish a job (a worker, or the calling thread doing it too) reports it."""
        with _FINISH_LOCK:
            if self.done.is_set():
                return
            self.error, self.seconds, self.where = error, seconds, where
            self.done.set()


_FINISH_LOCK = threading.Lock()


def job_for(path: str, meta: dict, config: dict, target=None) -> KernelJob:
    """The job of one call site of a generated module (``KERNELS`` entry ``meta``)."""
    from ..codegen.triton.ops import POINTER_TYPES

    dtype_of = {ptr: str(dtype).replace("torch.", "") for dtype, ptr in POINTER_TYPES.items()}
    arg_dtypes = tuple(dtype_of[t] for t in meta["signature"].values() if t.startswith("*"))
    if meta.get("symbolic"):   # every size argument, at the example inputs
        sizes = tuple(meta["size_hints"])
    else:
        sizes = (meta["xnumel"], meta["rnumel"]) if meta["reduction"] else (meta["xnumel"],)
    return KernelJob(path, meta["function"], arg_dtypes, sizes, dict(config), target)


# ---------------------------------------------------------------- compiling one job

class _TargetOnlyDriver:
    """What ``JITFunction.warmup`` asks of Triton's driver, answered for a GPU that is not here."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


@contextlib.contextmanager
def target_driver(target):
    """Triton compiles for ``target`` (``("cuda", 90, 32)``) inside; ``None``: the real GPU.
    Only for processes that compile and never launch: kernels compiled inside are cached
    in process under device 0."""
    if target is None:
        yield
        return
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    previous = getattr(driver, "_active", None)
    driver.set_active(_TargetOnlyDriver(GPUTarget(*target)))
    try:
        yield
    finally:
        driver.set_active(previous)


def compile_job(message: dict, in_worker: bool = False):
    """Compile one job in this process; returns Triton's compiled kernel.

    A worker does not import torch itself (it takes seconds to import, as long as several
    compiles; some Tritons import it when they first compile): it names the pointers'
    dtypes without torch, checks that Triton specialized them as a launch with tensors
    will, and builds the kernel's launcher, which this Triton compiles with the C
    compiler on first use, into Triton's cache, where the launch finds it."""
    from .kernel_files import import_kernel_file

    path = message["path"]
    module = import_kernel_file(path, os.path.basename(path)[:-3])
    function = getattr(module, message["function"])
    if in_worker:
        from triton.runtime.jit import MockTensor

        pointers = [MockTensor(_DtypeName(d)) for d in message["arg_dtypes"]]
    else:
        import torch

        pointers = [getattr(torch, d) for d in message["arg_dtypes"]]
    with target_driver(message["target"]):
        kernel = function.warmup(*pointers, *message["sizes"], grid=(1,), **message["config"])
        if in_worker:
            _check_pointer_types(kernel, message["arg_dtypes"])
            _build_launcher(kernel)
    return kernel


class _DtypeName:
    """A pointer argument's dtype for Triton's specialization, named without torch
    (Triton reads ``str(dtype)``, as for ``torch.float32``)."""

    def __init__(self, name: str):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"

    def __eq__(self, other):
        return isinstance(other, _DtypeName) and other.name == self.name

    def __hash__(self):
        return hash(("dtype", self.name))


def _check_pointer_types(kernel, arg_dtypes) -> None:
    pointers = [t for t in kernel.src.signature.values() if isinstance(t, str) and t.startswith("*")]
    found = [p.lstrip("*k") for p in pointers]
    if len(found) != len(arg_dtypes) or any(
            f not in _TRITON_DTYPES.get(d, ()) for f, d in zip(found, arg_dtypes)):
        raise RuntimeError(f"pointer types {pointers} do not match the launch's {arg_dtypes}")


# torch dtype name -> Triton's type names, for the pointer arguments surge generates
# (a bool pointer is ``*i1`` up to Triton 3.7 and ``*u1`` from 3.9).
_TRITON_DTYPES = {"float32": ("fp32",), "float16": ("fp16",), "bfloat16": ("bf16",), "float64": ("fp64",),
                  "int8": ("i8",), "int16": ("i16",), "int32": ("i32",), "int64": ("i64",), "uint8": ("u8",),
                  "bool": ("i1", "u1")}


def _warm_up(target: tuple) -> None:
    """Compile a tiny kernel for ``target`` (worker_warmup.py); a failure only means the
    first job pays for Triton's first-compile setup."""
    try:
        from triton.runtime.jit import MockTensor

        from .worker_warmup import add_one

        with target_driver(target):
            add_one.warmup(MockTensor(_DtypeName("float32")), 16, BLOCK=16, grid=(1,))
    except Exception as error:
        print(f"compile worker warm-up failed: {type(error).__name__}: {error}", file=sys.stderr)


def _build_launcher(kernel) -> None:
    """Build the launcher of a compiled kernel where Triton compiles launchers (C source
    per signature, cached by Triton); nothing where it does not, or cannot here."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher

        CudaLauncher(kernel.src, kernel.metadata)
    except Exception:  # another Triton's launcher, or one that needs the GPU: built at launch
        pass


# ---------------------------------------------------------------- workers

# A worker imports ``surge.runtime`` without ``surge/__init__.py``, which imports torch.
# Triton's argument specialization (C++, Tritons 3.6-3.7) imports torch on the first
# compile only to tell its tensors apart (``torch.Tensor``); the worker passes stand-ins
# (``MockTensor``), so a module holding a class of that name answers it: the first
# compile takes 0.45 s instead of importing torch (~2 s on a GPU host). The launch in the
# calling process, with real tensors, finds the same binary (tests check it).
_WORKER_BOOTSTRAP = """
import sys, types
package = types.ModuleType("surge")
package.__path__ = [sys.argv[1]]
sys.modules["surge"] = package
torch = types.ModuleType("torch")
torch.Tensor = type("Tensor", (), {})
sys.modules["torch"] = torch
from surge.runtime.compile_pool import _worker_main
raise SystemExit(_worker_main())
"""


class _Worker:
    def __init__(self):
        self.is_ready = False
        env = dict(os.environ, TRITON_INTERPRET="0")
        # the folder holding the surge package (this file is surge/runtime/compile_pool.py)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
        cache_dir = _triton_cache_dir()
        if cache_dir:
            env["TRITON_CACHE_DIR"] = cache_dir
        target = _known_target()
        # Jobs and results travel as pickles, which run code when loaded: the channel must
        # be this process's and the worker's only. Anonymous pipes (subprocess.PIPE) are
        # inherited descriptors, reachable by no path another user could open, and
        # close_fds (Popen's default) hands the worker no other descriptor of ours.
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER_BOOTSTRAP, os.path.join(root, "surge")]
                                     + ([json.dumps(target)] if target else []), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)

    def ready(self) -> bool:
        try:
            self.is_ready = pickle.load(self.proc.stdout) == "ready"
        except Exception:  # it could not start (an import failed, or it was retired): the pool does without it
            self.close()
        return self.is_ready

    def run(self, job: KernelJob) -> tuple:
        pickle.dump(job.message(for_worker=True), self.proc.stdin)
        self.proc.stdin.flush()
        return pickle.load(self.proc.stdout)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()


def _known_target() -> tuple | None:
    """This process's GPU target if CUDA is set up here (a worker warms up for it)."""
    try:
        import torch

        return _current_target() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    except Exception:
        return None


def _current_target() -> tuple:
    from triton.runtime.driver import driver

    target = driver.active.get_current_target()
    return (target.backend, target.arch, target.warp_size)


def _triton_cache_dir() -> str | None:
    try:
        from triton import knobs
        return knobs.cache.dir
    except (ImportError, AttributeError):
        return None


class CompilePool:
    def __init__(self):
        self.jobs: queue.Queue = queue.Queue()
        self.workers: list = []
        self.lock = threading.Lock()
        self.done_keys: set = set()
        self.queued_keys: set = set()   # submitted, not yet accounted
        self.pending: list = []         # submitted jobs no one has waited for yet
        self.launcher_builds: list = []  # threads building launchers of kernels compiled here
        self.batch_start = 0.0
        self.totals = dict(jobs=0, in_process=0, in_workers=0, failed=0, batches=0)

    def start_workers(self, jobs: int, limit: int | None = None) -> None:
        """Start workers for a batch of ``jobs`` kernels coming (without waiting for them):
        one per ``JOBS_PER_WORKER`` jobs, within ``pool_size(limit)`` (``limit``:
        ``Options.compile_workers``). A worker takes as long to start as a few compiles
        (it imports torch and Triton), so small batches get none."""
        with self.lock:
            wanted = min(jobs // JOBS_PER_WORKER, pool_size(limit))
            while len(self.workers) < wanted:
                try:
                    worker = _Worker()
                except OSError as error:
                    logs.log("perf", f"no kernel compile worker: {error}")
                    return
                self.workers.append(worker)
                threading.Thread(target=self._serve, args=(worker,), daemon=True).start()

    def _serve(self, worker: _Worker) -> None:
        if not worker.ready():
            return
        while True:
            job = self.jobs.get()
            try:
                error, seconds = worker.run(job)
            except Exception as failure:  # the worker died: its job compiles at launch
                job.finish(f"worker exited: {type(failure).__name__}", 0.0, "worker")
                worker.close()
                return
            job.finish(error, seconds, "worker")

    def prepare(self, jobs: list) -> list:
        """Compile ``jobs`` not compiled by this process before; returns those it ran."""
        fresh = self.submit(jobs)
        self.finish_pending()   # also jobs with these keys submitted before
        return fresh

    def submit(self, jobs: list) -> list:
        """Queue ``jobs`` not compiled or queued by this process before and return at once
        (those queued): workers compile them while the caller goes on (a training graph's
        backward is lowered while the forward's kernels compile); ``finish_pending`` waits."""
        fresh = []
        with self.lock:
            for job in jobs:
                key = job.key()
                if key not in self.done_keys and key not in self.queued_keys:
                    self.queued_keys.add(key)
                    fresh.append(job)
            if not fresh:
                return []
            if not self.pending:
                self.batch_start = time.perf_counter()
            self.pending.extend(fresh)
        device_target = _current_target() if self.workers and any(j.target is None for j in fresh) else None
        for job in fresh:
            job.worker_target = job.target or device_target
            self.jobs.put(job)
        return fresh

    def finish_pending(self) -> None:
        """Compile what is queued, here and in the workers, and wait for every submitted job.
        A kernel's first launch calls this, so that it launches what a worker compiled
        instead of compiling it again."""
        with self.lock:
            if not self.pending:
                return
            jobs, self.pending = self.pending, []
        while True:   # the calling thread compiles too, from the same queue
            try:
                self._compile_here(self.jobs.get_nowait())
            except queue.Empty:
                break
        for job in jobs:
            # A worker still busy with a job at the end (or one that started late): compile it
            # here too rather than wait idle; whichever finishes first counts.
            if not job.done.wait(0.05):
                self._compile_here(job)
            if not job.done.wait(JOB_TIMEOUT_S):
                job.finish("timed out", JOB_TIMEOUT_S, "worker")
        with self.lock:
            builds, self.launcher_builds = self.launcher_builds, []
        for thread in builds:
            thread.join()
        self._account(jobs, time.perf_counter() - self.batch_start)
        self._retire_starting()

    def _retire_starting(self) -> None:
        """Stop the workers still starting when a batch is done. They took none of its jobs
        (its kernels were in Triton's cache, or few), and starting (importing Triton, the
        warm-up compile) keeps a CPU busy each for a second or two, just when the compiled
        graph starts running on this host: a DeiT-S step measured right after a compile of
        cached kernels took 2x longer while 15 workers started. A later batch starts workers
        again."""
        with self.lock:
            starting = [w for w in self.workers if not w.is_ready]
            self.workers = [w for w in self.workers if w.is_ready]
        for worker in starting:
            with contextlib.suppress(OSError):
                worker.proc.kill()
            worker.close()
        if starting:
            logs.log("perf", f"stopped {len(starting)} kernel compile workers still starting after the batch")

    def _compile_here(self, job: KernelJob) -> None:
        start = time.perf_counter()
        try:
            kernel = compile_job(job.message())
            job.finish(None, time.perf_counter() - start, "process")
        except Exception as error:
            job.finish(f"{type(error).__name__}: {error}", time.perf_counter() - start, "process")
            return
        # Where Triton builds a kernel's launcher with the C compiler at its first launch
        # (~0.3 s, one after another), build it now beside this thread's next compile: the
        # thread waits on the compiler without the GIL. The launch finds it in Triton's cache.
        thread = threading.Thread(target=_build_launcher, args=(kernel,), daemon=True)
        thread.start()
        with self.lock:
            self.launcher_builds.append(thread)

    def _account(self, jobs: list, seconds: float) -> None:
        failed = [j for j in jobs if j.error]
        with self.lock:
            self.done_keys.update(j.key() for j in jobs if not j.error)
            self.queued_keys.difference_update(j.key() for j in jobs)
        in_workers = sum(1 for j in jobs if j.where == "worker")
        for k, v in (("jobs", len(jobs)), ("in_process", len(jobs) - in_workers), ("in_workers", in_workers),
                     ("failed", len(failed)), ("batches", 1)):
            self.totals[k] += v
        logs.log("perf", f"compiled {len(jobs)} kernels in {seconds:.2f} s ({in_workers} in "
                         f"{len(self.workers)} workers, {len(jobs) - in_workers} in process)"
                 + "".join(f"; {os.path.basename(j.path)}:{j.function} left to its launch: {j.error}"
                           for j in failed))

    def shutdown(self) -> None:
        for worker in self.workers:
            worker.close()


POOL = CompilePool()
atexit.register(POOL.shutdown)
start_workers = POOL.start_workers
prepare = POOL.prepare
submit = POOL.submit
finish_pending = POOL.finish_pending


# ---------------------------------------------------------------- the worker process

def _worker_main() -> int:
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)   # whatever compiling prints must not reach the protocol stream
    import triton  # noqa: F401

    if len(sys.argv) > 2:   # the GPU target, when the pool knew it: warm up while jobs are prepared
        _warm_up(tuple(json.loads(sys.argv[2])))
    # Ready only now: a job handed over earlier would wait here behind the warm-up (seconds
    # where Triton imports torch on its first compile) while the calling thread, finding
    # the queue empty, compiled it again itself.
    pickle.dump("ready", protocol)
    protocol.flush()
    requests = sys.stdin.buffer
    while True:
        try:
            message = pickle.load(requests)
        except EOFError:
            return 0
        start = time.perf_counter()
        try:
            if message["target"] is None:
                raise RuntimeError("a worker compiles for a named target only")
            kernel = compile_job(message, in_worker=True)
            error = None if kernel is not None else "nothing compiled"
        except Exception as failure:
            error = f"{type(failure).__name__}: {failure}"
        pickle.dump((error, time.perf_counter() - start), protocol)
        protocol.flush()

