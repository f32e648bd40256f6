"""Cache entries per code object, recompiles, and the cache size limit.

Each code object has a ``CodeCache``: the generated entry functions, tried in
order on each call. A miss first tries the captures of earlier processes kept
on disk (``disk_cache.py``), then captures again (a recompile when entries
exist) and logs which guard of the most recent entry failed. After
``options.cache_size_limit`` recompiles the code object runs eagerly.
"""
from __future__ import annotations

import functools
import weakref

from .. import fallbacks, logs
from ..counters import counters
from ..options import default_cache_dir
from . import disk_cache, native_checks
from .cache_entry import CacheEntry
from .codegen import MISS
from .dynamic_dims import DynamicState


class CodeCache:
    def __init__(self, code, backend=None, resume_cache=None, use_disk=True):
        self.code = code
        # Captures of this code are kept on disk and looked up there (not for explain's
        # private caches, nor for generated resume code).
        self.use_disk = use_disk and disk_cache.stores_captures_of(code)
        self._disk_key = None
        self._disk_entries: list | None = None  # stored entries not adopted yet: (run, graph, record)
        self.backend = backend
        # code -> the CodeCache of a resume function this code's graph breaks call.
        self.resume_cache = resume_cache
        self.entries: list[CacheEntry] = []
        # The entries' generated functions, in lookup order (read on the hot path).
        self.runners: list = []
        self.recompiles = 0
        self.run_eagerly = False
        # The sizes and numbers earlier captures saw: what changed becomes symbolic.
        self.dynamic_state = DynamicState()
        # Entries were dropped because an object they held died: capturing again is a
        # recompile all the same.
        self.dropped = False

    def clear(self) -> None:
        self.entries.clear()
        self.runners.clear()
        self.recompiles = 0
        self.run_eagerly = False
        self.dynamic_state = DynamicState()
        self.dropped = False
        self._disk_entries = None

    def miss(self, fn, args, kwargs, options, backend, records=None):
        """Capture a new entry for this call (or run eagerly past the limit) and run it."""
        counters["cache_misses"] += 1
        if self.run_eagerly:
            return fn(*args, **kwargs)
        # Fallbacks announced while this call compiles concern this code (fallbacks.py).
        with fallbacks.at_user_code(self._site(fn, options)):
            return self._compile_and_run(fn, args, kwargs, options, backend, records)

    def _site(self, fn, options) -> fallbacks.UserSite:
        # Resume functions carry the user's function's name (resume.py).
        return fallbacks.UserSite(self.code, fn.__qualname__, options.warn_fallbacks)

    def _compile_and_run(self, fn, args, kwargs, options, backend, records):
        native_checks.start(default_cache_dir(options), options.cxx, options.native_checks)
        use_disk = self.use_disk and options.frontend_cache
        if use_disk:
            result = self._from_disk(fn, args, kwargs, options, backend, records)
            if result is not MISS:
                return result
        from .global_state import python_builtins

        with python_builtins():  # surge's code runs with Python's (the trace reads the program's)
            entry = self._new_entry(fn, args, kwargs, options, backend, records, use_disk)
        if entry is None:
            return fn(*args, **kwargs)
        counters["cache_hits"] -= 1  # the entry's own run below counts a hit; this call was a miss
        result = entry.run(fn, args, kwargs)
        if result is MISS:
            # The guards read state the call itself just changed; run eagerly this once.
            counters["cache_hits"] += 1
            return fn(*args, **kwargs)
        return result

    def _new_entry(self, fn, args, kwargs, options, backend, records, use_disk) -> CacheEntry | None:
        """A new entry for this call, or None once the code object recompiled too often."""
        if self.entries or self.dropped:
            if self.recompiles >= options.cache_size_limit:
                self.run_eagerly = True
                fallbacks.announce(f"it was recompiled {self.recompiles} times (cache_size_limit="
                                   f"{options.cache_size_limit}); last failing guard: "
                                   f"{self._failed_guard(fn, args, kwargs)}", outcome="now runs eagerly")
                return None
            self.recompiles += 1
            counters["recompiles"] += 1
            recompile_reason = self._failed_guard(fn, args, kwargs)
            logs.log("recompiles", f"recompiling {self.code.co_name} "
                     f"({self.code.co_filename}:{self.code.co_firstlineno}): guard failed: {recompile_reason}")
        else:
            recompile_reason = None
        # The capture machinery is imported on the first capture: a process whose calls
        # all run stored captures (disk_cache.py) never loads it.
        from ..backends import before_capture
        from .breaks import ResumeCaller
        from .capture import capture_call

        before_capture(backend, args)
        counters["frames"] += 1
        resume_caller = None if self.resume_cache is None else \
            ResumeCaller(self.resume_cache, options, backend, records)
        entry = capture_call(fn, args, kwargs, options, backend, resume_caller, dynamic_state=self.dynamic_state)
        entry.recompile_reason = recompile_reason
        if entry.disk_record is not None:
            if use_disk and self._disk_key is not None:
                disk_cache.store_record(options, self._disk_key, entry.disk_record)
            entry.disk_record = None
        self.entries.append(entry)
        self.runners.append(entry.run)
        if entry.constants is not None:
            entry.constants.when_dead(functools.partial(self._drop, entry))
        if records is not None:
            records.append(entry)
        return entry

    def _drop(self, entry: CacheEntry) -> None:
        """An object the entry holds weakly died: it can never match again."""
        for i, held in enumerate(self.entries):
            if held is entry:
                del self.entries[i]
                del self.runners[i]
                self.dropped = True
                return

    def _from_disk(self, fn, args, kwargs, options, backend, records):
        """Run the call through a capture an earlier process stored, adopting it; MISS if none fits."""
        if self._disk_entries is None:
            self._disk_key = disk_cache.code_key(self.code, options)
            stored = disk_cache.load_records(options, self._disk_key) if self._disk_key else []
            self._disk_entries = []
            for record in reversed(stored):  # the newest first
                made = disk_cache.runnable(record, backend, counters, fallbacks.current_site(), options)
                if made is not None:
                    self._disk_entries.append((*made, record))
        for item in self._disk_entries:
            run, graph, record = item
            counters["cache_hits"] -= 1  # the entry's run counts a hit; this call was a miss
            result = run(fn, args, kwargs)
            if result is MISS:
                counters["cache_hits"] += 1
                continue
            self._disk_entries.remove(item)
            counters["frontend_disk_hits"] += 1
            logs.log("perf", f"frontend disk cache: {self.code.co_name} ({self.code.co_filename}:"
                             f"{self.code.co_firstlineno}) runs a stored capture")
            entry = CacheEntry(run, record.source, record.guards_text, _no_diagnosis, graph=graph)
            self.entries.append(entry)
            self.runners.append(run)
            if records is not None:
                records.append(entry)
            return result
        return MISS

    def _failed_guard(self, fn, args, kwargs) -> str:
        if not self.entries:
            return "an object the earlier entries checked by identity was deleted"
        entry = self.entries[-1]
        return entry.diagnose(fn, args, kwargs) or "(no single guard failed)"


# code object -> {(backend id, fullgraph): CodeCache}. Compiles of one function with
# the same backend share entries; another backend (or fullgraph) gets its own.
_CACHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_ALL: "weakref.WeakSet[CodeCache]" = weakref.WeakSet()


def _no_diagnosis(fn, args, kwargs):
    return "(a guard of a capture loaded from disk; SURGE_FRONTEND_CACHE=0 names it)"


def cache_for(code, backend, fullgraph: bool) -> CodeCache:
    per_code = _CACHES.setdefault(code, {})
    key = (id(backend), fullgraph)
    cache = per_code.get(key)
    if cache is None:
        # Holding the backend keeps its id unique.
        cache = CodeCache(code, backend, lambda resume: cache_for(resume, backend, fullgraph))
        per_code[key] = cache
        _ALL.add(cache)
    return cache


def private_cache(code, backend, fullgraph: bool) -> CodeCache:
    """A cache not shared with other compiles of the same code (used by explain); the
    resume functions its graph breaks call get private caches too."""
    resume_caches: dict = {}

    def resume_cache(resume):
        found = resume_caches.get(resume)
        if found is None:
            found = resume_caches[resume] = CodeCache(resume, backend, resume_cache, use_disk=False)
            _ALL.add(found)
        return found

    cache = CodeCache(code, backend, resume_cache, use_disk=False)
    _ALL.add(cache)
    return cache


def reset_all() -> None:
    for cache in list(_ALL):
        cache.clear()
    fallbacks.forget_warnings()
