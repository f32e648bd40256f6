"""The one place where surge's disk caches touch the disk.

Every cache under ``SURGE_CACHE_DIR`` (captures, compiled graphs, generated
modules, kernel files, kernel binaries, C++ libraries, tuning choices) keeps its
files in one folder of the cache root through a ``Store``, which gives them:

- **atomic writes**: a temporary file in the same folder, fsync, rename; a reader
  sees a whole file or none, and a file already mapped into a process (a loaded
  ``.so``) is replaced by a new inode, never rewritten in place;
- **integrity**: the size and blake2b hash of the bytes are recorded at write,
  in a header line for data surge parses itself (``write_bytes``/``read_bytes``:
  pickles, JSON) or in a ``<name>.sum`` sidecar for files handed to an importer,
  ``dlopen`` or Triton (``write_file``/``read_file``). A file whose record is
  missing or does not match is not loaded: the caller rebuilds it and the
  rebuild's write replaces it;
- **trust**: caches hold code surge runs, so, as OpenSSH checks ``~/.ssh``, every
  folder from the cache root down must be owned by this user and not writable by
  group or others, and so must each file read. Folders surge creates are made
  with mode 0700, files 0600;
- **a fallback**: a cache root that cannot be created or written, or that fails the
  trust check, gives one warning; the process then keeps new entries in a private
  folder of its own (mode 0700, removed at exit). A root that is trusted but not
  writable (a read-only copy) is still read; new entries go to the private folder.

The stores never raise on a disk problem: a read that cannot happen is a miss,
a write that cannot happen is logged, and the compile goes on. The keys are the
caches' own; ``sources_fingerprint`` is the part of them that names surge's
sources and its dependencies' versions.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import pathlib
import shutil
import stat
import tempfile

from . import logs
from .counters import counters

HEADER_MAGIC = b"surge-cache-1"
SIDECAR_SUFFIX = ".sum"
TEMP_SUFFIX = ".tmp"
MANIFEST = "manifest"
FOLDER_MODE = 0o700   # files get 0600 from mkstemp


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def _record(data: bytes) -> bytes:
    return HEADER_MAGIC + f" {len(data)} {digest(data)}\n".encode()


def _matches(record: bytes, data: bytes) -> bool:
    return record == _record(data)


def sources_fingerprint(folders: tuple, versions: str) -> str:
    """A hash of surge's sources in ``folders`` (of the package), ``options.py`` and ``target.py``,
    with the ``versions`` of what else shapes an entry (torch, triton, Python): a
    changed surge or dependency never reads another's entries. Callers cache it."""
    root = pathlib.Path(__file__).resolve().parent
    hasher = hashlib.sha256()
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            hasher.update(str(path.relative_to(root)).encode())
            hasher.update(path.read_bytes())
    for ground in ("options.py", "target.py"):   # what the compile's config and target mean
        hasher.update((root / ground).read_bytes())
    hasher.update(versions.encode())
    return hasher.hexdigest()


# ---------------------------------------------------------------- trust

def folder_problem(path: str) -> str | None:
    """What is wrong with ``path`` as a folder surge may load code from, or None."""
    try:
        st = os.stat(path)
    except OSError as why:
        return f"cannot be read ({why.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    return _owner_problem(st)


def _owner_problem(st: os.stat_result) -> str | None:
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by {'group' if st.st_mode & stat.S_IWGRP else 'others'} (mode {st.st_mode & 0o777:o})"
    return None


def _make_folders(path: str) -> None:
    """Create ``path`` and its missing parents with mode 0700 (``os.makedirs`` gives
    the parents the default mode)."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, FOLDER_MODE)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise NotADirectoryError(f"{folder} is not a folder") from None


def _writable(folder: str) -> bool:
    """Tried, not read from the mode bits: root passes any permission check."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, suffix=TEMP_SUFFIX)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


_PRIVATE: list = []   # this process's private cache root, made on first need


def private_root() -> str:
    if not _PRIVATE:
        root = tempfile.mkdtemp(prefix="surge-cache-")   # mode 0700
        atexit.register(_remove_private, root, os.getpid())
        _PRIVATE.append(root)
    return _PRIVATE[0]


def _remove_private(root: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:   # not from a forked child that exits before its parent
        shutil.rmtree(root, ignore_errors=True)


def _warn(key: str, folder: str, problem: str, consequence: str) -> None:
    """One warning per cache root and kind of problem, naming the folder at fault."""
    logs.warn_once(f"cache {key} {problem.split(' (')[0]}", f"surge: cache folder {folder} {problem}; {consequence}")


_PRIVATELY = "compiled code is kept in a private folder for this process only"
_UNTRUSTED = "surge does not load from it (another user could change the code it holds); " + _PRIVATELY


def _resolve(root: str, kind: str) -> tuple:
    """(folders to read from, folder to write to) for the cache ``kind`` under ``root``."""
    root = os.path.abspath(root)
    configured = os.path.join(root, kind)
    for folder in (root, configured):   # checked before surge creates anything in them
        problem = folder_problem(folder) if os.path.isdir(folder) else None
        if problem is not None:
            _warn(root, folder, problem, _UNTRUSTED)
            return [], _private(kind)
    try:
        _make_folders(configured)
    except OSError as why:
        if not os.path.isdir(root):
            _warn(root, root, f"cannot be created ({why.strerror or why})", _PRIVATELY)
            return [], _private(kind)
    if not os.path.isdir(configured):   # a read-only root without this kind's folder
        _warn(root, root, "is not writable", _PRIVATELY)
        return [], _private(kind)
    if not _writable(configured):
        _warn(root, configured, "is not writable", "its entries are still read; new " + _PRIVATELY)
        return [configured], _private(kind)
    return [configured], configured


def _private(kind: str) -> str:
    folder = os.path.join(private_root(), kind)
    _make_folders(folder)
    return folder


_STORES: dict = {}


def store(root: str, kind: str) -> "Store":
    """The store of the cache ``kind`` (a folder name) under the cache root ``root``. Where
    it reads and writes is decided once per process; trust is checked again at each read."""
    found = _STORES.get((root, kind))
    if found is None:
        found = _STORES[(root, kind)] = Store(kind, os.path.abspath(root), *_resolve(root, kind))
    return found


# ---------------------------------------------------------------- reading and writing

def _read_trusted(path: str) -> bytes | None:
    """The bytes of ``path`` if it is a regular file owned by this user and not writable
    by others; None (logged, or warned for a foreign file) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as why:
        logs.log("fallbacks", f"disk cache: cannot read {path} ({why.strerror or why})")
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        problem = "is not a regular file" if not stat.S_ISREG(st.st_mode) else _owner_problem(st)
        if problem is not None:
            logs.warn_once(f"cache file {path}", f"surge: cache file {path} {problem}; not loaded")
            return None
        return f.read()


def _rejected(path: str, why: str) -> None:
    counters["disk_cache_rejected"] += 1
    logs.log("fallbacks", f"disk cache: {path} {why}; rebuilding it")


def _read_framed(path: str) -> bytes | None:
    """The payload of a header-framed file if it is intact (see ``_record``)."""
    raw = _read_trusted(path)
    if raw is None:
        return None
    header, newline, payload = raw.partition(b"\n")
    if not _matches(header + newline, payload):
        _rejected(path, "is damaged (its size or hash does not match its header)")
        return None
    return payload


def _read_checked(path: str) -> bytes | None:
    """The bytes of a file with a sidecar record if both are there and agree."""
    data = _read_trusted(path)
    if data is None:
        return None
    record = _read_trusted(path + SIDECAR_SUFFIX)
    if record is None:
        _rejected(path, "has no integrity record")
    elif not _matches(record, data):
        _rejected(path, "is damaged (its size or hash does not match its record)")
    else:
        return data
    return None


def _read_folder(path: str) -> dict | None:
    """{file name: (path, bytes)} of an intact folder written by ``write_folder``."""
    problem = folder_problem(path)
    if problem is not None:
        logs.warn_once(f"cache folder {path}", f"surge: cache folder {path} {problem}; not loaded")
        return None
    manifest = _read_framed(os.path.join(path, MANIFEST))
    if manifest is None:
        if not os.path.exists(os.path.join(path, MANIFEST)):   # (a damaged one was reported)
            _rejected(path, "has no manifest")
        return None
    files = {}
    for line in manifest.decode().splitlines():
        file_name, _, recorded = line.partition(" ")
        file_path = os.path.join(path, file_name)
        data = _read_trusted(file_path)
        if data is None or digest(data) != recorded:
            _rejected(file_path, "is missing or damaged")
            return None
        files[file_name] = (file_path, data)
    return files


def _write_atomic(path: str, data: bytes) -> None:
    folder = os.path.dirname(path)
    _make_folders(folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".", suffix=TEMP_SUFFIX)   # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class Store:
    """One cache's folder (see the module docstring). Names are file names in it."""

    def __init__(self, kind: str, root: str, read_folders: list, folder: str):
        self.kind = kind
        self.root = root
        self.folder = folder             # where new files go
        self._folders = list(dict.fromkeys(read_folders + [folder]))

    def _trusted(self) -> list:
        """The folders to read from, each checked now with its parent (the cache root, or
        the private one): trust is checked before every read, not once per process. A
        folder that fails is dropped, with one warning; writes then go to the private folder."""
        out = []
        for folder in list(self._folders):
            if not os.path.isdir(folder):
                continue   # nothing there (yet)
            for step in (os.path.dirname(folder), folder):
                problem = folder_problem(step)
                if problem is not None:
                    _warn(self.root, step, problem, _UNTRUSTED)
                    self._folders.remove(folder)
                    private = _private(self.kind)
                    if folder == self.folder and folder != private:
                        self.folder = private
                        self._folders.append(private)
                    break
            else:
                out.append(folder)
        return out

    # data surge parses itself: header + payload in one file

    def read_bytes(self, name: str) -> bytes | None:
        """The payload stored under ``name``; None when there is none or it is damaged."""
        for folder in self._trusted():
            found = _read_framed(os.path.join(folder, name))
            if found is not None:
                return found
        return None

    def write_bytes(self, name: str, data: bytes) -> str | None:
        """Store ``data`` under ``name``; the path written, or None (logged)."""
        return self._write(name, lambda path: _write_atomic(path, _record(data) + data))

    # files read by others (importers, dlopen, Triton): raw bytes + a sidecar record

    def read_file(self, name: str) -> tuple | None:
        """(path, bytes) of an intact ``name``; None when there is none or it is damaged.
        Load from that path only what these bytes are (hash before dlopen or import)."""
        for folder in self._trusted():
            path = os.path.join(folder, name)
            found = _read_checked(path)
            if found is not None:
                return path, found
        return None

    def write_file(self, name: str, data: bytes) -> str | None:
        """Store ``data`` as the file ``name`` with its record; the path written, or None."""
        def write(path):
            _write_atomic(path + SIDECAR_SUFFIX, _record(data))   # first: the file never lacks one
            _write_atomic(path, data)
        return self._write(name, write)

    def temp_path(self, suffix: str) -> str:
        """A new private file in the write folder, for a tool (the C++ compiler) to write
        into; ``install_file`` stores what it wrote."""
        _make_folders(self.folder)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=suffix + TEMP_SUFFIX)
        os.close(fd)
        return tmp

    def install_file(self, name: str, tmp: str) -> str | None:
        """Store the finished file ``tmp`` as ``name`` (a new file, renamed into place:
        a library this process has loaded from that path stays intact) and remove ``tmp``."""
        try:
            with open(tmp, "rb") as f:
                data = f.read()
        finally:
            _remove(tmp)
        return self.write_file(name, data)

    # folders of files (a kernel binary and its metadata), renamed into place whole

    def read_folder(self, name: str) -> dict | None:
        """{file name: (path, bytes)} of an intact folder ``name``, or None."""
        for folder in self._trusted():
            path = os.path.join(folder, name)
            if os.path.isdir(path):
                found = _read_folder(path)
                if found is not None:
                    return found
        return None

    def write_folder(self, name: str, files: dict) -> str | None:
        """Store ``files`` ({file name: bytes}) as the folder ``name``; a damaged folder
        there is replaced, an intact one (another process's) kept."""
        def write(path):
            _make_folders(os.path.dirname(path))
            tmp = tempfile.mkdtemp(dir=os.path.dirname(path), prefix=".", suffix=TEMP_SUFFIX)   # mode 0700
            try:
                for file_name, data in files.items():
                    _write_atomic(os.path.join(tmp, file_name), data)
                manifest = "".join(f"{n} {digest(d)}\n" for n, d in files.items()).encode()
                _write_atomic(os.path.join(tmp, MANIFEST), _record(manifest) + manifest)
                if os.path.isdir(path):
                    if _read_folder(path) is not None:
                        return   # another process stored it first
                    # set the damaged one aside first: a folder is only renamed over an empty one
                    aside = tempfile.mkdtemp(dir=os.path.dirname(path), prefix=".", suffix=TEMP_SUFFIX)
                    os.replace(path, os.path.join(aside, name))
                    shutil.rmtree(aside, ignore_errors=True)
                try:
                    os.replace(tmp, path)
                except OSError:
                    if _read_folder(path) is None:
                        raise
                    # another process stored it in the meantime
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return self._write(name, write)

    def _write(self, name: str, write) -> str | None:
        """Write into this store's folder, or, when that fails (a full disk, a folder made
        read-only since), into this process's private folder."""
        self._trusted()   # not into a folder that is no longer trusted
        path = os.path.join(self.folder, name)
        try:
            write(path)
            return path
        except OSError as why:
            logs.log("perf", f"disk cache: could not write {path} ({why})")
        if _PRIVATE and self.folder.startswith(_PRIVATE[0] + os.sep):
            return None
        folder = _private(self.kind)
        path = os.path.join(folder, name)
        try:
            write(path)
            if folder not in self._folders:
                self._folders.append(folder)
            return path
        except OSError as why:
            logs.log("perf", f"disk cache: could not write {path} either ({why})")
            return None
