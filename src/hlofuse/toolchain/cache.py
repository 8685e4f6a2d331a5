"""The on-disk cache of compiled shared objects: private, atomic, self-checking.

Entries are content-addressed: `<key>.so` with `<key>.sum` (its SHA-256) and `<key>.c` (the
source, kept so a compiler error can point at it; `<key>.1.c`, ... for an object built from
several translation units); records (`<key>.plan`, a compiled program's
plan written by the runtime; `<key>.version`, a compiler's version) are headed by the SHA-256
of the rest. Files are written to a
temporary directory inside the cache and renamed into place, so a concurrent reader never sees
a partial file; an entry whose checksum does not match is treated as missing and rebuilt. The
directory must belong to the user and not be writable by others, because its contents get
loaded as code.

Faults: a process killed mid-write leaves at most a `tmp-*` file or directory (never loaded,
removed once stale) or an object without its checksum (a miss: compiled again). A cache
directory that cannot be written (read-only, full disk, no permission) is not an error: a
warning, and the compile goes to a private temporary directory of this process instead
(`fallback_cache`). The cache is capped (`HLOFUSE_CACHE_MAX_BYTES`, default 2 GiB): once a
new entry takes the total over the cap, the least recently used entries (by modification
time, which a hit renews) are removed until it is back under `LOW_WATER` of the cap. Each
process keeps a running total per cache directory (bytes found by its last scan plus what it
installed since), so an install only lists the directory when that total passes the cap or
the last scan is older than `RESCAN_S` (other processes write too): with a full cache of
thousands of entries, a compile does not stat every one of them.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import os
import shutil
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ENTRY_SUFFIXES = (".so", ".sum", ".c", ".plan", ".version")
TEMPORARY_PREFIX = "tmp-"
DEFAULT_MAX_BYTES = 2 << 30
MAX_BYTES_VARIABLE = "HLOFUSE_CACHE_MAX_BYTES"
# A temporary file or directory older than this belongs to a process that died mid-write.
STALE_TEMPORARY_S = 3600.0
# Entries used this recently are kept above the cap: a process may be about to load them.
IN_USE_S = 60.0
# Eviction goes down to this fraction of the cap, so the next installs fit without a scan.
LOW_WATER = 0.9
# A running total older than this is refreshed by a scan: other processes install entries too.
RESCAN_S = 60.0
# errno values that mean "this directory cannot take the entry", not "the program is wrong".
UNWRITABLE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM,
                               errno.EDQUOT, errno.EFBIG})


class CacheError(RuntimeError):
    """The cache directory cannot be used safely; the message says why and how to fix it."""


class CacheWarning(UserWarning):
    """The cache could not be written; compiling went to a temporary directory instead."""


def is_unwritable(error: OSError) -> bool:
    """Whether `error` says the cache cannot take a write (full, read-only, not ours)."""
    return error.errno in UNWRITABLE_ERRNOS


def max_bytes() -> int:
    """The cache's size cap: $HLOFUSE_CACHE_MAX_BYTES (bytes; suffixes K, M, G allowed),
    else 2 GiB. A value that does not parse is refused with a CacheError naming it."""
    text = os.environ.get(MAX_BYTES_VARIABLE, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        value = int(number) * scale
    except ValueError:
        raise CacheError(f"{MAX_BYTES_VARIABLE}={text!r} is not a size in bytes (e.g. 500M, "
                         "2G)") from None
    if value < 0:
        raise CacheError(f"{MAX_BYTES_VARIABLE}={text!r} must not be negative")
    return value


def default_cache_dir() -> Path:
    """$HLOFUSE_CACHE_DIR, else $XDG_CACHE_HOME/hlofuse, else ~/.cache/hlofuse."""
    override = os.environ.get("HLOFUSE_CACHE_DIR")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "hlofuse"


def ensure_cache_dir(path: Path | None = None) -> Path:
    """Create (mode 0700) or check the cache directory; refuse one others could write."""
    path = Path(path) if path is not None else default_cache_dir()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise _UncreatableCache(f"cannot create the cache directory {path}: "
                                f"{e.strerror or e}") from None
    info = path.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise CacheError(f"cache path {path} is not a directory")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise CacheError(f"cache directory {path} belongs to another user (uid {info.st_uid}); "
                         "set HLOFUSE_CACHE_DIR to a directory of your own")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheError(f"cache directory {path} is writable by others "
                         f"(mode {stat.S_IMODE(info.st_mode):o}); run `chmod 700 {path}` or set "
                         "HLOFUSE_CACHE_DIR")
    return path


class _UncreatableCache(CacheError):
    """The directory could not be made (read-only parent, full disk): a fault, not a setting."""


def _writable(root: Path) -> bool:
    # os.access answers for the real user and is True for root whatever the mode, so the
    # mode bits are checked too: a directory made read-only is one the user means to keep.
    mode = stat.S_IMODE(root.stat().st_mode)
    return os.access(root, os.W_OK | os.X_OK) and bool(mode & stat.S_IWUSR)


_fallback_lock = threading.Lock()
_fallback: Cache | None = None


def fallback_cache(reason: str) -> Cache:
    """This process's private temporary cache (removed at exit), with a warning the first
    time, naming `reason`."""
    global _fallback
    with _fallback_lock:
        if _fallback is None or not _fallback.root.is_dir():
            root = Path(tempfile.mkdtemp(prefix="hlofuse-cache-"))
            atexit.register(shutil.rmtree, root, True)
            _fallback = Cache(root, fallback=True)
            warnings.warn(f"{reason}; compiling into the temporary directory {root} instead "
                          "(nothing is kept for the next run; set HLOFUSE_CACHE_DIR to a "
                          "writable directory)", CacheWarning, stacklevel=3)
        return _fallback


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Cache:
    """Entries of one cache directory."""

    root: Path

    fallback: bool = False

    @staticmethod
    def open(path: Path | None = None) -> Cache:
        """The cache at `path` (default `default_cache_dir()`); one that cannot be created or
        written gives a CacheWarning and this process's temporary cache. An unsafe one (not
        ours, writable by others) is still refused: that is a setting to fix, not a fault."""
        try:
            root = ensure_cache_dir(path)
        except _UncreatableCache as e:
            return fallback_cache(str(e))
        if not _writable(root):
            return fallback_cache(f"the cache directory {root} is not writable")
        return Cache(root)

    def unwritable(self, error: OSError) -> Cache:
        """After a write to this cache failed with `error` (full disk, read-only): a warning
        and the temporary cache to write to instead."""
        if self.fallback:
            raise error
        return fallback_cache(f"cannot write to the cache directory {self.root}: "
                              f"{error.strerror or error}")

    def object_path(self, key: str) -> Path:
        return self.root / f"{key}.so"

    def source_path(self, key: str, unit: int = 0) -> Path:
        """The source kept beside `key`'s object: `<key>.c`, and `<key>.<unit>.c` for the
        further translation units of an object built from several."""
        return self.root / (f"{key}.c" if unit == 0 else f"{key}.{unit}.c")

    def lookup(self, key: str) -> Path | None:
        """The shared object of `key` if present and intact; a damaged entry is removed."""
        so, checksum = self.object_path(key), self.root / f"{key}.sum"
        try:
            expected = checksum.read_text().strip()
            actual = digest(so.read_bytes())
        except OSError:
            return None
        if expected == actual:
            _touch(so)
            return so
        for path in (so, checksum):
            with _ignore_missing():
                path.unlink()
        return None

    def read_record(self, key: str, suffix: str = ".plan") -> bytes | None:
        """The bytes stored by `write_record`, if present and intact; a damaged record is
        removed."""
        path = self.root / f"{key}{suffix}"
        try:
            data = path.read_bytes()
        except OSError:
            return None
        checksum, newline, payload = data.partition(b"\n")
        if newline and checksum.decode("ascii", "replace") == digest(payload):
            _touch(path)
            return payload
        with _ignore_missing():
            path.unlink()
        return None

    def write_record(self, key: str, data: bytes, suffix: str = ".plan") -> None:
        _atomic_write(self.root / f"{key}{suffix}", digest(data).encode() + b"\n" + data)

    def temporary_dir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=self.root))

    def write_source(self, key: str, source: str, unit: int = 0) -> Path:
        target = self.source_path(key, unit)
        _atomic_write(target, source.encode())
        return target

    def install(self, key: str, built: Path, units: int = 1) -> Path:
        """Move a freshly built object into the cache atomically, checksum after it."""
        data = built.read_bytes()
        target = self.object_path(key)
        os.replace(built, target)
        _atomic_write(self.root / f"{key}.sum", (digest(data) + "\n").encode())
        added = len(data) + sum(_size(self.source_path(key, unit)) for unit in range(units))
        if _usage.needs_scan(self.root, added, max_bytes()):
            self.evict(keep=key)
        return target

    def evict(self, limit: int | None = None, keep: str | None = None) -> int:
        """Remove least recently used entries until the cache holds at most `limit` bytes
        (default `max_bytes()`), never the entry `keep` nor one used in the last `IN_USE_S`
        seconds (a compile of this process may be about to load it); stale temporaries of
        dead processes go first. Returns the bytes removed. Concurrent evictions only race
        to unlink."""
        limit = max_bytes() if limit is None else limit
        target = int(limit * LOW_WATER)
        now = time.time()
        groups: dict[str, list[tuple[Path, int, float]]] = {}
        removed = 0
        for path in self.entries():
            try:
                info = path.lstat()
            except OSError:
                continue
            if path.name.startswith(TEMPORARY_PREFIX):
                if now - info.st_mtime > STALE_TEMPORARY_S:
                    removed += _size(path)
                    _remove(path)
                continue
            # An entry is every file named after its key (the part before the first dot).
            entry = path.name.partition(".")[0]
            groups.setdefault(entry, []).append((path, info.st_size, info.st_mtime))
        total = sum(size for files in groups.values() for _, size, _ in files)
        if total > limit:
            # The oldest use of a group is its newest file: a hit renews the .so or the record.
            order = sorted(groups, key=lambda k: max(m for _, _, m in groups[k]))
            for stem in order:
                if total <= target:
                    break
                if stem == keep or now - max(m for _, _, m in groups[stem]) < IN_USE_S:
                    continue
                for path, size, _ in sorted(groups[stem], key=lambda f: f[0].suffix != ".sum"):
                    _remove(path)  # the checksum first: a half-removed entry is a miss
                    total -= size
                    removed += size
        _usage.scanned(self.root, total)
        return removed

    def entries(self) -> Iterator[Path]:
        for path in sorted(self.root.iterdir()):
            if path.suffix in ENTRY_SUFFIXES or path.name.startswith(TEMPORARY_PREFIX):
                yield path

    def plans(self) -> int:
        """How many compiled programs (saved plans) the cache holds."""
        return sum(1 for p in self.entries() if p.suffix == ".plan")

    def info(self) -> tuple[int, int]:
        """(number of compiled objects, total bytes of everything hlofuse keeps here)."""
        objects = 0
        total = 0
        for path in self.entries():
            if path.suffix == ".so":
                objects += 1
            total += _size(path)
        return objects, total

    def clear(self) -> int:
        """Remove every entry (and stale temporary directories); returns how many files."""
        removed = 0
        for path in list(self.entries()):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with _ignore_missing():
                    path.unlink()
            removed += 1
        return removed


class _RunningTotals:
    """Per cache directory: the bytes its last scan found in this process, plus what this
    process installed since, and when that scan was."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[Path, tuple[int, float]] = {}

    def needs_scan(self, root: Path, added: int, limit: int) -> bool:
        with self._lock:
            known = self._totals.get(root)
            if known is None or time.monotonic() - known[1] > RESCAN_S:
                return True
            total = known[0] + added
            self._totals[root] = (total, known[1])
            return total > limit

    def scanned(self, root: Path, total: int) -> None:
        with self._lock:
            self._totals[root] = (total, time.monotonic())


_usage = _RunningTotals()


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _touch(path: Path) -> None:
    """Mark an entry used now (for least-recently-used eviction); a read-only cache stays
    usable, so a failure is ignored."""
    try:
        os.utime(path)
    except OSError:
        pass


def _remove(path: Path) -> None:
    """Best effort: eviction never fails a compile (another process may remove it first, or
    the directory may have become read-only)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
        return
    try:
        path.unlink()
    except OSError:
        pass


def _atomic_write(target: Path, data: bytes) -> None:
    fd, name = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(name, target)
    except BaseException:
        with _ignore_missing():
            os.unlink(name)
        raise


class _ignore_missing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, value: object, traceback: object) -> bool:
        return isinstance(value, FileNotFoundError)
