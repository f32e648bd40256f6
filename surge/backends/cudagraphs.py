"""``mode="reduce-overhead"``: an ``Executable`` recorded once into a CUDA graph and replayed.

``CudaGraphed`` wraps one Executable (one graph of one size: an inference graph, a
training forward or backward) and is called as the Executable is (``call_boxed``):

- the first call warms up: ``Executable.warmup()`` (kernels compiled and loaded, autotuned
  on first launch), then a normal call;
- the next call records: inputs whose memory stays put are read in place, the others are
  copied into static buffers; the Executable's launches are captured by the recorder
  (``cudagraph_recorder.py``) in the pool of its compiled function; then it replays;
- later calls check the in-place inputs' addresses (a parameter that moved or was
  re-assigned records again, or replays an earlier recording made for the new addresses:
  modules of one structure share their compiled graphs), copy the other inputs into their
  buffers and replay. At most ``MAX_VARIANTS`` recordings per graph.

Read in place: parameters, tensors marked static (``torch._dynamo.mark_static_address``
sets ``_dynamo_static_input_type``), the same tensor at the same address in the warmup and
the recording call (module buffers, a KV cache handed in at each step), and outputs of an
earlier recording of the same pool (a forward's saved tensors, read by its backward).

One ``GraphPool`` per compiled function and device holds every recording of it (forward,
backward, several sizes), in the order they were made, in one memory pool: a recording
reuses memory that the earlier ones only needed while they ran. So replaying a recording
overwrites the outputs of itself and of every recording made after it (never those of
earlier ones, whose outputs were held while the later ones were made): those outputs are
invalidated first (``cudagraph_outputs.py``), and a replay whose overwrite would reach
tensors a pending backward still needs runs without the graph instead. At most
``cudagraph_max_records`` graphs are recorded per pool; graphs beyond run in the default mode.

What cannot be recorded (``cudagraph_policy.py``) runs in the default mode, with one line
on the ``cudagraphs`` log channel per graph.
"""
from __future__ import annotations

import dataclasses
import itertools
import weakref

import torch

from .. import fallbacks, logs
from ..counters import counters
from .cudagraph_outputs import FREED, STALE, held_elsewhere, make_alias, reference_counts
from .cudagraph_policy import RecordingWatch, device_problem, why_not_recorded

# How an input of a recording is read.
STATE = "state"   # in place; a new address records again
POOL = "pool"     # in place, an output of an earlier recording; a new address runs without the graph
_sequence = itertools.count()
# Recordings of one compiled graph for distinct parameter addresses (modules of one
# structure sharing the graph: the layers of a model compiled one by one).
MAX_VARIANTS = 64


class GraphPool:
    """The recordings of one compiled function on one device, sharing one memory pool.

    It holds them weakly: a recording lives as long as the wrapper that made it."""

    def __init__(self, recorder, max_records: int, name: str = "a compiled function"):
        self.recorder = recorder
        self.max_records = max_records
        self.name = name
        self.handle = None              # the recorder's pool, made at the first recording
        self._recordings: list = []     # weak references, oldest recording first
        self.records_made = 0
        self._overwritten: dict = {}    # sequence -> overwritten_by's answer, until the recordings change
        _ALL_POOLS.add(self)

    @property
    def recordings(self) -> list:
        live = [r for r in (ref() for ref in self._recordings) if r is not None]
        if len(live) != len(self._recordings):
            self._recordings = [weakref.ref(r) for r in live]
            self._overwritten = {}
        return live

    def graphs_recorded(self) -> int:
        """How many compiled graphs (wrappers) have recordings alive here."""
        return len({r.owner for r in self.recordings})

    def static_storages(self) -> set:
        return {ptr for r in self.recordings for ptr in r.output_storages}

    def state_storages(self) -> set:
        """The memory that recordings read in place as parameters or buffers."""
        return {ptr for r in self.recordings for ptr in r.state_storages}

    def add(self, recording: "RecordedGraph") -> None:
        self.records_made += 1
        self._recordings.append(weakref.ref(recording))
        self._overwritten = {}
        counters["cudagraphs_recorded"] += 1

    def overwritten_by(self, recording: "RecordedGraph") -> list:
        """The recordings whose outputs a replay of ``recording`` overwrites (weakly held:
        the answer is kept while every recording is alive)."""
        found = self._overwritten.get(recording.sequence)
        if found is not None:
            live = [ref() for ref in found]
            if all(r is not None for r in live):
                return live
        live = [r for r in self.recordings if r.sequence >= recording.sequence]
        self._overwritten[recording.sequence] = [weakref.ref(r) for r in live]
        return live

    def invalidate_all(self) -> None:
        for r in self.recordings:
            r.invalidate(STALE)


_ALL_POOLS: "weakref.WeakSet[GraphPool]" = weakref.WeakSet()


def mark_step_begin() -> None:
    """A new iteration: every output handed out by a replay so far is stale now."""
    for pool in list(_ALL_POOLS):
        pool.invalidate_all()


@dataclasses.dataclass(eq=False)
class RecordedGraph:
    """One recording: its inputs' plan, its outputs' plan, and what it handed out last."""
    recording: object                 # the recorder's Recording
    recorder: object
    name: str
    in_place: list                    # (position, data_ptr, STATE or POOL)
    copies: list                      # (position, StaticInput)
    plan: list                        # per output: ("alias", t) ("saved", t) ("input", k, size, stride, offset) ("value", v)
    saved: list                       # the saved-for-backward outputs (the graph's own tensors)
    owner: int = 0                    # id of the wrapper that made it
    state_storages: frozenset = frozenset()   # storages of its STATE inputs
    saved_baseline: list = dataclasses.field(default_factory=list)
    handed: list = dataclasses.field(default_factory=list)   # aliases of the last replay
    output_storages: frozenset = frozenset()
    sequence: int = dataclasses.field(default_factory=lambda: next(_sequence))
    positions: list = dataclasses.field(default_factory=list)       # of the in-place inputs
    pointer_table: list = dataclasses.field(default_factory=list)   # their addresses, by position
    _texts: dict = dataclasses.field(default_factory=dict)          # invalidation messages, formatted

    def __post_init__(self):
        self.positions = [p for p, _, _ in self.in_place]
        table = [0] * (max(self.positions) + 1 if self.positions else 0)
        for position, pointer, _ in self.in_place:
            table[position] = pointer
        self.pointer_table = table

    def invalidate(self, message: str) -> None:
        if self.handed:
            text = self._texts.get(message)
            if text is None:
                text = self._texts[message] = message.format(name=self.name)
            for alias in self.handed:
                self.recorder.invalidate(alias, text)
            self.handed = []

    def backward_pending(self) -> bool:
        return bool(self.saved) and held_elsewhere(self.saved, self.saved_baseline)

    def hand_out(self, inputs: list, container: type):
        storages: dict = {}
        out = []
        for step in self.plan:
            kind = step[0]
            if kind == "alias":
                alias = make_alias(step[1], storages)
                self.handed.append(alias)
                out.append(alias)
            elif kind == "input":
                given = inputs[step[1]]
                whole = step[2] == given.shape and step[3] == given.stride() and step[4] == given.storage_offset()
                out.append(given if whole else given.as_strided(step[2], step[3], step[4]))
            else:
                out.append(step[1])
        return container(out)

    def __del__(self):
        try:
            self.invalidate(FREED)
        except Exception:   # never raise while collected
            pass


class _RunsAnExecutable:
    """Called as the Executable it wraps is (boxed or not), and described by it."""

    def __getattr__(self, name):   # the Executable's description (launches, artifact, ...)
        if name == "executable":   # not set yet (while unpickling)
            raise AttributeError(name)
        return getattr(self.executable, name)

    def __call__(self, *args):
        return self.call_boxed(list(args))


class CudaGraphed(_RunsAnExecutable):
    """An Executable run as a CUDA graph: warmup, record, replay (the module docstring)."""

    def __init__(self, executable, pool: GraphPool, numbers_fixed: bool = False, site=None):
        self.executable = executable
        self.pool = pool
        # Every call brings the same number inputs (``RecordedPerSize`` keys calls by them),
        # so a recording may hold them as the constants they are.
        self.numbers_fixed = numbers_fixed
        self.warmed = False
        self.first_inputs: list = []    # (weak reference, address) of the warmup call's inputs
        self.recorded: RecordedGraph | None = None   # the recording calls replay
        self.variants: list[RecordedGraph] = []      # every recording, one per set of parameter addresses
        self.not_recorded: str | None = None    # why it runs in the default mode
        self._announced: set = set()
        self.site = site or fallbacks.current_site()   # the user code it was compiled for

    def call_boxed(self, args: list):
        if self.not_recorded is not None:
            return self.executable.call_boxed(args)
        recorded = self.recorded
        if recorded is None:
            if not self.warmed:
                return self._warm_up(args)
            return self._record(args, moved=False)
        if not _in_place_inputs_match(recorded, args):
            recorded = next((r for r in self.variants if _in_place_inputs_match(r, args)), None)
            if recorded is None:
                return self._inputs_moved(args)
            self.recorded = recorded
        overwritten = self.pool.overwritten_by(recorded)
        for r in overwritten:
            if r.backward_pending():
                return self._unrecorded(args, "a backward still needs the tensors an earlier replay saved for "
                                              "it (a forward called again before the first one's backward): "
                                              "this call runs without its graph so as not to overwrite them")
        return self._replay(recorded, args, overwritten)

    def _warm_up(self, args: list):
        self.warmed = True
        self.executable.warmup()
        self.first_inputs = [(_weak(a), _pointer(a)) for a in args]
        with self.pool.recorder.workspaces_released():   # the warmup's own are not kept
            return self.executable.call_boxed(args)

    def _inputs_moved(self, args: list):
        """No recording reads these inputs where they are. Parameters elsewhere (another
        module sharing this graph, a re-assigned parameter; or the outputs of a recording
        made again) record again; an input that was an earlier recording's output and now
        is not (its forward ran without its graph) runs this call without the graph."""
        recorded = self.recorded
        moved = [(p, kind) for p, pointer, kind in recorded.in_place if args[p].data_ptr() != pointer]
        in_pool = self.pool.static_storages()
        if any(kind == STATE or args[p].untyped_storage().data_ptr() in in_pool for p, kind in moved):
            self._log(f"{self._describe()}: input(s) {[p for p, _ in moved]} moved: recorded again")
            return self._record(args, moved=True)
        return self._unrecorded(args, f"input(s) {[p for p, _ in moved]}, outputs of an earlier call, are not "
                                      "in the memory of a recording (that call ran without its graph)")

    # -- recording

    def _record(self, args: list, moved: bool):
        try:
            return self._try_record(args, moved)
        except Exception as error:   # never fail the user's program: run in the default mode
            if args:                  # not consumed yet: the failure came before the replay
                return self._give_up(args, f"recording failed: {type(error).__name__}: {error}")
            raise

    def _try_record(self, args: list, moved: bool):
        pool = self.pool
        if moved and len(self.variants) >= MAX_VARIANTS:
            return self._give_up(args, f"{len(self.variants)} recordings of this graph for as many sets of "
                                       "parameter addresses already")
        graphs = pool.graphs_recorded()   # those of wrappers that are gone do not count
        if not self.variants and graphs >= pool.max_records:
            return self._give_up(args, f"{graphs} graphs recorded for {pool.name} already "
                                       f"(cudagraph_max_records={pool.max_records}, e.g. one per input size)")
        numbers = [k for k, a in enumerate(args) if not isinstance(a, torch.Tensor)]
        if numbers and not self.numbers_fixed:
            return self._give_up(args, f"it takes non-tensor inputs at positions {numbers}")
        in_place, copied = self._classify(args, moved)
        reason = why_not_recorded(self.executable, args, set(copied), pool.recorder.device_type)
        if reason:
            return self._give_up(args, reason)
        copies = [(k, StaticInput(args[k])) for k in copied]
        static_args = list(args)
        for k, static in copies:
            static_args[k] = static.buffer
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None) or \
            _constant_device(self.executable)
        if pool.handle is None or not pool.recordings:
            # a fresh pool once every recording of the last one is gone: torch's allocator
            # frees a pool whose graphs are all released and refuses new captures into it
            pool.handle = pool.recorder.new_pool()
        watch = RecordingWatch(pool.recorder.device_type, self.executable.constants)

        def watched(call_args):
            with watch:
                return self.executable.call_boxed(call_args)

        try:
            with pool.recorder.workspaces_released():   # the capture makes its own, in the pool
                recording = pool.recorder.record(watched, static_args, pool.handle, device)
        except Exception as error:
            return self._give_up(args, f"recording failed: {type(error).__name__}: {error}")
        outputs = recording.outputs
        if not isinstance(outputs, (tuple, list)):
            return self._give_up(args, f"it returns a {type(outputs).__name__}, not a tuple or list of outputs")
        problem = (watch.problems[0] if watch.problems else None) or device_problem(list(outputs),
                                                                                   pool.recorder.device_type)
        if problem:
            return self._give_up(args, problem)
        recorded = self._plan(recording, args, in_place, copies, outputs)
        # counted here, where no loop variable of the planning holds an output
        recorded.saved_baseline = reference_counts(recorded.saved)
        pool.add(recorded)
        self.recorded = recorded
        self.variants.append(recorded)
        self._log(f"{self._describe()}: recorded ({len(in_place)} inputs read in place, {len(copies)} copied; "
                  f"{len(pool.recordings)} recording(s) in the pool)")
        return self._replay(recorded, args, pool.overwritten_by(recorded))

    def _classify(self, args: list, moved: bool) -> tuple:
        """(in place: [(position, data_ptr, kind)], copied: [position])."""
        from_pool, state = self.pool.static_storages(), self.pool.state_storages()
        in_place, copied = [], []
        for k, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                continue   # a number of a recording per size: a constant of it
            storage = a.untyped_storage().data_ptr()
            if storage in from_pool:
                in_place.append((k, a.data_ptr(), POOL))
            elif (isinstance(a, torch.nn.Parameter) or hasattr(a, "_dynamo_static_input_type")
                  or storage in state   # a parameter another recording reads (a forward's, saved for its backward)
                  or (not moved and self._same_as_at_warmup(k, a))):
                in_place.append((k, a.data_ptr(), STATE))
            else:
                copied.append(k)
        return in_place, copied

    def _same_as_at_warmup(self, k: int, a: torch.Tensor) -> bool:
        """The very tensor, at the same address, as in the warmup call (a buffer, a cache
        handed in at every call): likely to stay there."""
        if k >= len(self.first_inputs):
            return False
        ref, pointer = self.first_inputs[k]
        return ref is not None and ref() is a and pointer == a.data_ptr()

    def _plan(self, recording, args, in_place, copies, outputs) -> RecordedGraph:
        """How each output is handed out after a replay."""
        input_storages = {args[k].untyped_storage().data_ptr(): k for k, _, _ in in_place}
        saved_from = self.executable.saved_outputs_from
        plan, saved, storages = [], [], set()
        for index, out in enumerate(outputs):
            if not isinstance(out, torch.Tensor):
                plan.append(("value", out))
                continue
            ptr = out.untyped_storage().data_ptr()
            if ptr in input_storages:   # an input read in place (a parameter): the user's own tensor
                plan.append(("input", input_storages[ptr], out.shape, out.stride(), out.storage_offset()))
            elif saved_from is not None and index >= saved_from:
                plan.append(("saved", out))
                saved.append(out)
                storages.add(ptr)
            else:
                plan.append(("alias", out))
                storages.add(ptr)
        state = frozenset(args[k].untyped_storage().data_ptr() for k, _, kind in in_place if kind == STATE)
        return RecordedGraph(recording, self.pool.recorder, self._describe(), in_place, copies, plan, saved,
                             owner=id(self), output_storages=frozenset(storages), state_storages=state)

    # -- running

    def _replay(self, recorded: RecordedGraph, args: list, overwritten: list):
        # inputs first: one may be an output of the last replay (``x = f(x)``), valid until now
        for position, static in recorded.copies:
            static.fill(args[position])
        for r in overwritten:
            r.invalidate(STALE)
        inputs = list(args)
        args.clear()
        recorded.recording.replay()
        counters["cudagraphs_replayed"] += 1
        return recorded.hand_out(inputs, type(recorded.recording.outputs))

    def _unrecorded(self, args: list, why: str):
        self._log(f"{self._describe()}: {why}", once=why)
        return self.executable.call_boxed(args)

    def _give_up(self, args: list, why: str):
        """Run in the default mode from now on."""
        self.not_recorded = why
        self.recorded, self.variants = None, []
        counters["cudagraphs_not_recorded"] += 1
        self._log(f"{self._describe()}: not recorded, runs in the default mode: {why}")
        return self.executable.call_boxed(args)

    def _describe(self) -> str:
        where = f" of {self.site.name} ({self.site.location})" if self.site is not None else ""
        return f"graph {getattr(self.executable, 'path', '?').rsplit('/', 1)[-1]}{where}"

    def _log(self, message: str, once: str | None = None) -> None:
        if once is not None:
            if once in self._announced:
                return
            self._announced.add(once)
        logs.log("cudagraphs", message)


class RecordedPerSize(_RunsAnExecutable):
    """A graph compiled for symbolic sizes, in the mode: one recording holds the launches
    of one size, so calls are keyed by their sizes (every tensor input's shape and the
    number inputs, which are sizes or values of them) and each key is a ``CudaGraphed`` of
    its own: it warms up, records at its second call and replays, in the compiled
    function's pool. The pool's bound (``cudagraph_max_records``) caps the recordings;
    sizes beyond it run in the default mode, as do calls once ``MAX_SIZES`` keys were seen
    (a number input that changes at every call would otherwise grow the table)."""

    MAX_SIZES = 64

    def __init__(self, executable, pool: GraphPool):
        self.executable = executable
        self.pool = pool
        self.per_size: dict[tuple, CudaGraphed] = {}
        self.site = fallbacks.current_site()

    def call_boxed(self, args: list):
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        graphed = self.per_size.get(key)
        if graphed is None:
            if len(self.per_size) >= self.MAX_SIZES:
                logs.info_once(f"cudagraphs:sizes:{id(self)}", f"surge: {self.MAX_SIZES} sizes of a graph compiled "
                                                               "for symbolic sizes seen: further sizes run in the "
                                                               "default mode")
                return self.executable.call_boxed(args)
            graphed = self.per_size[key] = CudaGraphed(self.executable, self.pool, numbers_fixed=True,
                                                                 site=self.site)
        return graphed.call_boxed(args)


def _in_place_inputs_match(recorded: RecordedGraph, args: list) -> bool:
    """Whether every input ``recorded`` reads in place is where it was recorded."""
    return _pointers_equal(args, recorded.pointer_table, recorded.positions)


def _python_pointers_equal(tensors: list, pointers: list, positions: list) -> bool:
    return [tensors[k].data_ptr() for k in positions] == [pointers[k] for k in positions]


# torch's C++ loop over the in-place inputs (CUDA builds), else the same in Python
_pointers_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", _python_pointers_equal)


def _pointer(value) -> int | None:
    return value.data_ptr() if isinstance(value, torch.Tensor) else None


def _weak(value):
    return weakref.ref(value) if isinstance(value, torch.Tensor) else None


class StaticInput:
    """The buffer a copied input goes into before each replay: ``t``'s layout (shape,
    strides, storage offset) in memory of its own. An input whose elements overlap (a
    stride of 0: an expanded tensor) or leave gaps is copied as the span of memory it
    covers, which an elementwise copy into an overlapping buffer cannot do."""

    def __init__(self, t: torch.Tensor):
        extent = 0 if t.numel() == 0 else 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        base = torch.empty(t.storage_offset() + extent, dtype=t.dtype, device=t.device)
        self.buffer = base.as_strided(t.shape, t.stride(), t.storage_offset())
        self.span = None if extent == t.numel() else (base[t.storage_offset():], extent)

    def fill(self, t: torch.Tensor) -> None:
        if self.span is None:
            self.buffer.copy_(t)
            return
        region, extent = self.span
        region.copy_(t.as_strided((extent,), (1,), t.storage_offset()))


def _constant_device(executable) -> torch.device:
    for c in executable.constants:
        if isinstance(c, torch.Tensor):
            return c.device
    return torch.device("cuda")


# -- what the kernel backends call

CUDAGRAPH_MODES = "mode='reduce-overhead' or 'max-autotune'"


def for_mode(compiled, config, device: torch.device, pool_of):
    """``compiled`` (an Executable, or a graph's own forward that could not be compiled)
    as the mode in ``config`` runs it: wrapped for CUDA graphs when they are on and the
    graph's tensors are on a CUDA device. ``pool_of()`` gives the compiled function's pool."""
    from .executable import Executable
    from .size_variants import SizeVariants

    if not config.cudagraphs or not isinstance(compiled, (Executable, SizeVariants)):
        return compiled
    pool = pool_of()
    if device.type != pool.recorder.device_type:
        note_not_cuda(device)
        return compiled
    # one recording serves one size (a SizeVariants runs the variant whose size guards
    # hold: a new size's warmup call compiles it, before anything is recorded)
    if isinstance(compiled, SizeVariants) or _symbolic(compiled):
        return RecordedPerSize(compiled, pool)
    return CudaGraphed(compiled, pool)


def _symbolic(executable) -> bool:
    """Whether an Executable's input layouts are expressions of size symbols (its module
    writes them as names, ``'s0'``), not numbers."""
    return any(isinstance(v, str) for e in executable.inputs for v in (*e["shape"], *e["stride"]))


def note_not_cuda(device: torch.device) -> None:
    """The mode is accepted on other devices and runs the default mode: one info line."""
    message = (f"surge: {CUDAGRAPH_MODES} records CUDA graphs; graphs on {device.type} tensors run in the "
               "default mode")
    logs.info_once(f"cudagraphs:{device.type}", message)
    logs.log("cudagraphs", message)


def cuda_pool_for(device: torch.device, max_records: int) -> GraphPool:
    from .cudagraph_recorder import CudaRecorder

    return pool_for(f"cuda:{device}:{max_records}", CudaRecorder, max_records)


# -- pools per compiled function

_POOLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # user code object -> {key: GraphPool}


def pool_for(recorder_key: str, recorder_factory, max_records: int) -> GraphPool:
    """The pool of the compiled function being compiled now (its user code), shared by
    every graph compiled for it; a pool of its own for a graph compiled outside user code."""
    site = fallbacks.current_site()
    if site is None:
        return GraphPool(recorder_factory(), max_records)
    pools = _POOLS.setdefault(site.code, {})
    pool = pools.get(recorder_key)
    if pool is None:
        pool = pools[recorder_key] = GraphPool(recorder_factory(), max_records, f"{site.name} ({site.location})")
    return pool

