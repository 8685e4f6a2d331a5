"""Faults the cache survives: an interrupted compile, a full disk, a read-only directory, the
size cap, and compiles racing in threads."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from hlofuse.toolchain import Cache, build_shared_object, load_library
from hlofuse.toolchain import cache as cache_module
from hlofuse.toolchain.cache import CacheError, CacheWarning, max_bytes

SOURCE = """
__attribute__((visibility("default"))) int answer(int x) { return x * 2 + 42; }
"""
FLAGS = ("-O0", "-fPIC", "-shared")


def answer(path: Path, value: int) -> int:
    result: int = load_library(path).answer(value)
    return result


@pytest.fixture(autouse=True)
def fresh_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test sees the first fallback of its own (and so its warning).
    monkeypatch.setattr(cache_module, "_fallback", None)
    monkeypatch.setattr(cache_module, "_usage", cache_module._RunningTotals())


def source_numbered(k: int) -> str:
    return SOURCE.replace("42", str(100 + k))


@pytest.mark.needs_cc
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["kill", "ctrl-c"])
def test_a_compile_killed_midway_leaves_no_entry_and_is_redone(tmp_path: Path,
                                                               how: signal.Signals) -> None:
    # A source that takes the compiler a while (about 2 s at -O2: the test polls every 20 ms
    # and compiles it twice), so the kill lands during the compile.
    body = "\n".join(f"__attribute__((visibility(\"default\"))) double f{i}(double x) "
                     f"{{ return x * {i}.5 + __builtin_sin(x + {i}); }}" for i in range(1000))
    slow = SOURCE + body
    # A test run started as a background job inherits SIGINT ignored (and passes that on to
    # the compiler): the script takes Ctrl-C as a terminal would deliver it.
    script = textwrap.dedent(f"""
        import signal
        import sys
        from pathlib import Path
        from hlofuse.toolchain import Cache, build_shared_object
        signal.signal(signal.SIGINT, signal.default_int_handler)
        build_shared_object(sys.stdin.read(), ("-O2", "-fPIC", "-shared"),
                            Cache.open(Path({str(tmp_path / "cache")!r})))
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                               start_new_session=True)
    assert process.stdin is not None
    process.stdin.write(slow.encode())
    process.stdin.close()
    cache_dir = tmp_path / "cache"
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        if cache_dir.is_dir() and any(p.name.startswith("tmp-") and p.is_dir()
                                      for p in cache_dir.iterdir()):
            break  # the compiler is running in its temporary directory
        time.sleep(0.02)
    assert process.poll() is None, "the compile ended before it could be interrupted"
    os.killpg(process.pid, how)  # the process and the compiler under it, as a terminal does
    assert process.wait(timeout=60) != 0
    cache = Cache.open(cache_dir)
    assert cache.info()[0] == 0  # no object was installed
    if how == signal.SIGINT:  # an interrupted Python cleans up its temporary directory
        assert not [p for p in cache_dir.iterdir() if p.name.startswith("tmp-")]
    result = build_shared_object(slow, ("-O2", "-fPIC", "-shared"), cache)
    assert not result.cache_hit and answer(result.path, 1) == 44
    assert build_shared_object(slow, ("-O2", "-fPIC", "-shared"), cache).cache_hit


@pytest.mark.needs_cc
def test_an_object_without_its_checksum_is_never_loaded(tmp_path: Path) -> None:
    # What a kill between renaming the object and writing its checksum leaves behind.
    cache = Cache.open(tmp_path / "cache")
    built = build_shared_object(SOURCE, FLAGS, cache)
    (cache.root / f"{built.key}.sum").unlink()
    built.path.write_bytes(b"\x7fELF half written")
    assert cache.lookup(built.key) is None
    again = build_shared_object(SOURCE, FLAGS, cache)
    assert not again.cache_hit and answer(again.path, 0) == 42


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path: Path) -> None:
    cache = Cache.open(tmp_path / "cache")
    stale = cache.root / "tmp-deadbeef"
    stale.mkdir()
    (stale / "module.so").write_bytes(b"partial")
    fresh = cache.root / "tmp-running"
    fresh.mkdir()
    old = time.time() - 2 * cache_module.STALE_TEMPORARY_S
    os.utime(stale, (old, old))
    cache.evict()
    assert not stale.exists() and fresh.exists()


@pytest.mark.needs_cc
def test_a_full_disk_warns_and_compiles_into_a_temporary_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache.open(tmp_path / "cache")
    real_write = cache_module._atomic_write

    def full(target: Path, data: bytes) -> None:
        if target.parent == cache.root:
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        real_write(target, data)

    monkeypatch.setattr(cache_module, "_atomic_write", full)
    with pytest.warns(CacheWarning, match="No space left on device"):
        result = build_shared_object(SOURCE, FLAGS, cache)
    assert answer(result.path, 5) == 52
    assert cache.root not in result.path.parents
    assert cache.info()[0] == 0


@pytest.mark.needs_cc
def test_a_compiler_that_runs_out_of_space_is_not_a_compile_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache.open(tmp_path / "cache")
    real_run = subprocess.run
    calls = []

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        if str(cache.root) in command[-2]:  # the output file, inside the real cache
            return subprocess.CompletedProcess(command, 1, "", "/usr/bin/ld: final link "
                                               "failed: No space left on device\n")
        return real_run(command, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(subprocess, "run", run)
    with pytest.warns(CacheWarning):
        result = build_shared_object(SOURCE, FLAGS, cache)
    assert answer(result.path, 1) == 44 and len(calls) == 2


@pytest.mark.needs_cc
def test_a_read_only_cache_directory_warns_and_still_compiles(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    Cache.open(root)
    root.chmod(stat.S_IRUSR | stat.S_IXUSR)  # root ignores it for access; the mode says it
    try:
        with pytest.warns(CacheWarning, match="not writable"):
            cache = Cache.open(root)
        assert cache.fallback
        result = build_shared_object(SOURCE, FLAGS, cache)
        assert answer(result.path, 2) == 46
        assert list(root.iterdir()) == []
    finally:
        root.chmod(stat.S_IRWXU)


def test_a_cache_directory_that_cannot_be_created_falls_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.warns(CacheWarning, match="Read-only file system"):
        cache = Cache.open(tmp_path / "nowhere" / "cache")
    assert cache.fallback and cache.root.is_dir()


def test_an_unsafe_directory_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "open"
    path.mkdir()
    path.chmod(0o777)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CacheError, match="writable by others"):
            Cache.open(path)


def test_the_size_cap_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HLOFUSE_CACHE_MAX_BYTES", raising=False)
    assert max_bytes() == 2 << 30
    monkeypatch.setenv("HLOFUSE_CACHE_MAX_BYTES", "500M")
    assert max_bytes() == 500 << 20
    monkeypatch.setenv("HLOFUSE_CACHE_MAX_BYTES", "12345")
    assert max_bytes() == 12345
    monkeypatch.setenv("HLOFUSE_CACHE_MAX_BYTES", "lots")
    with pytest.raises(CacheError, match="HLOFUSE_CACHE_MAX_BYTES"):
        max_bytes()


@pytest.mark.needs_cc
def test_least_recently_used_entries_are_evicted_beyond_the_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache.open(tmp_path / "cache")
    built = []
    for k in range(3):
        built.append(build_shared_object(source_numbered(k), FLAGS, cache))
        stamp = time.time() - 1000 + 10 * k  # entry 0 oldest
        for path in cache.root.glob(f"{built[-1].key}.*"):
            os.utime(path, (stamp, stamp))
    assert cache.lookup(built[0].key) is not None  # a hit makes entry 0 the newest
    one_entry = sum(p.stat().st_size for p in cache.root.glob(f"{built[0].key}.*"))
    monkeypatch.setenv("HLOFUSE_CACHE_MAX_BYTES", str(int(one_entry * 2.5)))
    newest = build_shared_object(source_numbered(3), FLAGS, cache)
    assert cache.lookup(newest.key) is not None
    assert cache.lookup(built[0].key) is not None
    assert cache.lookup(built[1].key) is None and cache.lookup(built[2].key) is None
    assert cache.info()[1] <= one_entry * 2.5
    # an evicted entry is simply compiled again
    again = build_shared_object(source_numbered(1), FLAGS, cache)
    assert not again.cache_hit and answer(again.path, 0) == 101


@pytest.mark.needs_cc
def test_installs_under_the_cap_do_not_list_the_cache(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # A full cache holds thousands of entries: listing them on every compile cost more than
    # the compile. Only the first install of a process, one past the cap, or one after
    # RESCAN_S lists the directory.
    cache = Cache.open(tmp_path / "cache")
    listings = []
    entries = Cache.entries
    monkeypatch.setattr(Cache, "entries", lambda self: listings.append(1) or entries(self))
    build_shared_object(source_numbered(0), FLAGS, cache)
    assert len(listings) == 1
    for k in (1, 2, 3):
        build_shared_object(source_numbered(k), FLAGS, cache)
    assert len(listings) == 1
    monkeypatch.setattr(cache_module, "RESCAN_S", -1.0)
    build_shared_object(source_numbered(4), FLAGS, cache)
    assert len(listings) == 2


@pytest.mark.needs_cc
def test_eviction_goes_below_the_cap_to_leave_room(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache.open(tmp_path / "cache")
    keys = []
    for k in range(10):
        keys.append(build_shared_object(source_numbered(k), FLAGS, cache).key)
        stamp = time.time() - 1000 + 10 * k
        for path in cache.root.glob(f"{keys[-1]}.*"):
            os.utime(path, (stamp, stamp))
    total = cache.info()[1]
    cap = int(total * 0.95)
    monkeypatch.setenv("HLOFUSE_CACHE_MAX_BYTES", str(cap))
    newest = build_shared_object(source_numbered(10), FLAGS, cache)
    remaining = cache.info()[1]
    assert remaining <= cap * cache_module.LOW_WATER
    assert cache.lookup(newest.key) is not None and cache.lookup(keys[-1]) is not None
    assert cache.lookup(keys[0]) is None and cache.lookup(keys[1]) is None


@pytest.mark.needs_cc
def test_entries_in_use_are_kept_above_the_cap(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # compile_many builds several objects before loading them: none may vanish meanwhile.
    monkeypatch.setenv("HLOFUSE_CACHE_MAX_BYTES", "0")
    cache = Cache.open(tmp_path / "cache")
    first = build_shared_object(source_numbered(0), FLAGS, cache)
    second = build_shared_object(source_numbered(1), FLAGS, cache)
    assert answer(first.path, 0) == 100 and answer(second.path, 0) == 101
    monkeypatch.setattr(cache_module, "IN_USE_S", 0.0)
    third = build_shared_object(source_numbered(2), FLAGS, cache)
    assert cache.lookup(third.key) is not None and cache.info()[0] == 1


@pytest.mark.needs_cc
def test_cache_info_shows_count_size_and_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from hlofuse.cli import main

    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HLOFUSE_CACHE_MAX_BYTES", "3M")
    build_shared_object(SOURCE, FLAGS)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "compiled objects: 1" in out and "compiled programs: 0" in out
    size = Cache.open(tmp_path / "cache").info()[1]
    assert f"size: {size / 1e6:.2f} MB of 3 MB" in out
