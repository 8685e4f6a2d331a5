"""The on-disk cache of compiled shared objects: private, atomic, self-checking.

Entries are content-addressed: `<key>.so` with `<key>.sum` (its SHA-256) and `<key>.c` (the
source, kept so a compiler error can point at it); records (`<key>.plan`, a compiled program's
plan written by the runtime; `<key>.version`, a compiler's version) are headed by the SHA-256
of the rest. Files are written to a
temporary directory inside the cache and renamed into place, so a concurrent reader never sees
a partial file; an entry whose checksum does not match is treated as missing and rebuilt. The
directory must belong to the user and not be writable by others, because its contents get
loaded as code.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ENTRY_SUFFIXES = (".so", ".sum", ".c", ".plan", ".version")
TEMPORARY_PREFIX = "tmp-"


class CacheError(RuntimeError):
    """The cache directory cannot be used safely; the message says why and how to fix it."""


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
        raise CacheError(f"cannot create the cache directory {path}: {e.strerror or e}") from None
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


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Cache:
    """Entries of one cache directory."""

    root: Path

    @staticmethod
    def open(path: Path | None = None) -> Cache:
        return Cache(ensure_cache_dir(path))

    def object_path(self, key: str) -> Path:
        return self.root / f"{key}.so"

    def source_path(self, key: str) -> Path:
        return self.root / f"{key}.c"

    def lookup(self, key: str) -> Path | None:
        """The shared object of `key` if present and intact; a damaged entry is removed."""
        so, checksum = self.object_path(key), self.root / f"{key}.sum"
        try:
            expected = checksum.read_text().strip()
            actual = digest(so.read_bytes())
        except OSError:
            return None
        if expected == actual:
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
            return payload
        with _ignore_missing():
            path.unlink()
        return None

    def write_record(self, key: str, data: bytes, suffix: str = ".plan") -> None:
        _atomic_write(self.root / f"{key}{suffix}", digest(data).encode() + b"\n" + data)

    def temporary_dir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=self.root))

    def write_source(self, key: str, source: str) -> Path:
        target = self.source_path(key)
        _atomic_write(target, source.encode())
        return target

    def install(self, key: str, built: Path) -> Path:
        """Move a freshly built object into the cache atomically, checksum after it."""
        data = built.read_bytes()
        target = self.object_path(key)
        os.replace(built, target)
        _atomic_write(self.root / f"{key}.sum", (digest(data) + "\n").encode())
        return target

    def entries(self) -> Iterator[Path]:
        for path in sorted(self.root.iterdir()):
            if path.suffix in ENTRY_SUFFIXES or path.name.startswith(TEMPORARY_PREFIX):
                yield path

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


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    try:
        return path.stat().st_size
    except OSError:
        return 0


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
