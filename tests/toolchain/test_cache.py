"""The compile cache: private, atomic, self-repairing; compiler errors name the source."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hlofuse.cli import main
from hlofuse.toolchain import (
    DEFAULT_FLAGS,
    Cache,
    CacheError,
    CompileError,
    build_shared_object,
    default_cache_dir,
    ensure_cache_dir,
    load_library,
)

SOURCE = """
__attribute__((visibility("default"))) int answer(int x) { return x * 2 + 42; }
"""
# Quick to compile: the cache tests are about files, not code quality.
FLAGS = ("-O0", "-fPIC", "-shared")


def call_answer(path: Path, value: int) -> int:
    result: int = load_library(path).answer(value)
    return result


def test_cache_location_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.delenv("HLOFUSE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "hlofuse"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "hlofuse"
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"


def test_cache_directory_is_created_private(tmp_path: Path) -> None:
    path = ensure_cache_dir(tmp_path / "a" / "cache")
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_directory_writable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "shared"
    path.mkdir()
    path.chmod(0o777)
    with pytest.raises(CacheError, match="writable by others"):
        ensure_cache_dir(path)
    path.chmod(0o770)
    with pytest.raises(CacheError, match="chmod 700"):
        ensure_cache_dir(path)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a directory to another user needs root")
def test_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "theirs"
    path.mkdir(mode=0o700)
    os.chown(path, 12345, 12345)
    with pytest.raises(CacheError, match="belongs to another user"):
        ensure_cache_dir(path)


def test_a_file_in_place_of_the_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("not a directory")
    with pytest.raises(CacheError):
        ensure_cache_dir(path)


@pytest.mark.needs_cc
def test_compiled_objects_are_cached_and_reused(tmp_path: Path) -> None:
    cache = Cache.open(tmp_path / "cache")
    first = build_shared_object(SOURCE, FLAGS, cache)
    assert not first.cache_hit and call_answer(first.path, 1) == 44
    second = build_shared_object(SOURCE, FLAGS, cache)
    assert second.cache_hit and second.path == first.path
    other = build_shared_object(SOURCE, ("-O1", *FLAGS[1:]), cache)
    assert not other.cache_hit and other.path != first.path
    objects, size = cache.info()
    assert objects == 2 and size > 0
    assert not [p for p in cache.root.iterdir() if p.name.startswith("tmp-")]


@pytest.mark.needs_cc
@pytest.mark.parametrize("damage", ["truncate", "garbage", "missing-checksum"])
def test_corrupt_entry_is_detected_and_rebuilt(tmp_path: Path, damage: str) -> None:
    cache = Cache.open(tmp_path / "cache")
    built = build_shared_object(SOURCE, FLAGS, cache)
    data = built.path.read_bytes()
    if damage == "truncate":
        built.path.write_bytes(data[:len(data) // 3])
    elif damage == "garbage":
        built.path.write_bytes(b"\0" * len(data))
    else:
        (cache.root / f"{built.key}.sum").unlink()
    again = build_shared_object(SOURCE, FLAGS, cache)
    assert not again.cache_hit
    assert again.path.read_bytes() == data or call_answer(again.path, 0) == 42
    assert build_shared_object(SOURCE, FLAGS, cache).cache_hit


@pytest.mark.needs_cc
def test_two_processes_compiling_the_same_module_at_once(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from hlofuse.toolchain import Cache, build_shared_object, load_library
        cache = Cache.open(Path(sys.argv[1]))
        result = build_shared_object({SOURCE!r}, {FLAGS!r}, cache)
        print(load_library(result.path).answer(int(sys.argv[2])))
    """)
    cache_dir = tmp_path / "cache"
    processes = [subprocess.Popen([sys.executable, "-c", script, str(cache_dir), str(k)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for k in range(4)]
    outputs = [p.communicate(timeout=300) for p in processes]
    for k, (process, (out, err)) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, err
        assert out.strip() == str(2 * k + 42)
    cache = Cache.open(cache_dir)
    assert cache.info()[0] == 1
    assert not [p for p in cache_dir.iterdir() if p.name.startswith("tmp-")]
    assert build_shared_object(SOURCE, FLAGS, cache).cache_hit


@pytest.mark.needs_cc
def test_compile_error_names_the_source_and_the_message(tmp_path: Path) -> None:
    cache = Cache.open(tmp_path / "cache")
    with pytest.raises(CompileError) as info:
        build_shared_object("int broken( { return ; }\n", DEFAULT_FLAGS, cache)
    error = info.value
    assert error.source_path.exists()
    assert "broken" in error.source_path.read_text()
    assert str(error.source_path) in str(error)
    assert "error" in error.compiler_message
    assert cache.info()[0] == 0


def test_missing_compiler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    from hlofuse.toolchain import ToolchainError

    monkeypatch.setenv("CC", "no-such-compiler-hlofuse")
    with pytest.raises(ToolchainError, match="no C compiler found"):
        build_shared_object(SOURCE, FLAGS, Cache.open(tmp_path / "cache"))


@pytest.mark.needs_cc
def test_cache_command_reports_and_clears(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "cache"))
    build_shared_object(SOURCE, FLAGS)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "cache") in out and "compiled objects: 1" in out
    assert main(["cache", "clear"]) == 0
    assert "removed" in capsys.readouterr().out
    assert Cache.open(tmp_path / "cache").info() == (0, 0)


def test_cache_command_refuses_an_unsafe_directory(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "open"
    path.mkdir()
    path.chmod(0o777)
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(path))
    assert main(["cache", "info"]) == 2
    assert "writable by others" in capsys.readouterr().err
