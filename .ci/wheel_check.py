"""`make wheel-check`: hlofuse installed as a user installs it, from its wheel.

Builds the wheel from the files git tracks (or would track) in a copy of the repository,
checks that every runtime source and header the compiler reads at run time is in it, installs
it with its `jax` extra into a new virtual environment (not editable, not the repository's
.venv), and from a folder outside the repository runs `hlofuse cartpole --quick` (which
compiles C, with a cache of its own, so a missing runtime source fails it) and
examples/from_jax_layer.py. Uses only the standard library; exits non-zero naming what failed.

    python .ci/wheel_check.py [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "hlofuse"
# What the package reads from its own folder at run time besides its modules: the C and CUDA
# runtimes and their headers, the math library's header, the peers' kernels, the typing marker.
DATA_SUFFIXES = (".c", ".h", ".cuh", ".cu", ".typed")
EXAMPLE = ROOT / "examples" / "from_jax_layer.py"


class CheckFailed(Exception):
    """One step of the check failed; the message says which and why."""


def run(command: list[str | Path], cwd: Path, env: dict[str, str], what: str) -> str:
    """Run `command`, echoing its output; its stdout, or CheckFailed naming `what`."""
    print(f"$ {' '.join(map(str, command))}", flush=True)
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    print(done.stdout, end="", flush=True)
    print(f"({time.perf_counter() - start:.1f} s)", flush=True)
    if done.returncode != 0:
        raise CheckFailed(f"{what} exited with status {done.returncode}")
    return done.stdout


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that would put the repository's code on the path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    return env | extra


def tracked_files() -> list[Path]:
    """The repository's files as git sees them: tracked or untracked-but-not-ignored."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    names = sorted({name for name in listed.stdout.decode().split("\0") if name})
    return [Path(name) for name in names if (ROOT / name).is_file()]


def copy_tree(destination: Path) -> None:
    """A copy of the repository's files, so that no build/ or egg-info left in the checkout
    (stale files of an earlier layout among them) can reach the wheel."""
    for relative in tracked_files():
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target)


def build_wheel(tree: Path, out: Path, env: dict[str, str]) -> Path:
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", out,
         tree], tree, env, "building the wheel")
    wheels = sorted(out.glob("hlofuse-*.whl"))
    if len(wheels) != 1:
        raise CheckFailed(f"expected one hlofuse wheel in {out}, found {wheels}")
    return wheels[0]


def expected_package_files(tree: Path) -> set[str]:
    """Every module and data file of the package, as paths inside the wheel."""
    source = tree / "src"
    return {path.relative_to(source).as_posix() for path in (source / "hlofuse").rglob("*")
            if path.is_file() and (path.suffix == ".py" or path.suffix in DATA_SUFFIXES)}


def check_wheel_contents(wheel: Path, tree: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        packed = set(archive.namelist())
    missing = sorted(expected_package_files(tree) - packed)
    if missing:
        raise CheckFailed(f"{wheel.name} lacks {len(missing)} file(s) of src/hlofuse: "
                          + ", ".join(missing)
                          + " (package data: [tool.setuptools.package-data] in pyproject.toml)")
    data = sorted(name for name in packed if name.endswith(DATA_SUFFIXES))
    print(f"{wheel.name}: every module and data file of src/hlofuse is in it "
          f"({len(data)} data files: {', '.join(data)})")


def install(wheel: Path, venv: Path, env: dict[str, str]) -> Path:
    run([sys.executable, "-m", "venv", venv], venv.parent, env, "creating the virtual environment")
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         f"{wheel}[jax]"], venv.parent, env, "installing the wheel with its jax extra")
    return python


def check_installed(python: Path, venv: Path, work: Path, env: dict[str, str]) -> None:
    work.mkdir()
    where = run([python, "-c", "import hlofuse; print(hlofuse.__file__)"], work, env,
                "importing hlofuse").strip()
    if not Path(where).resolve().is_relative_to(venv.resolve()):
        raise CheckFailed(f"hlofuse was imported from {where}, not from the wheel in {venv}")
    output = run([venv / "bin" / "hlofuse", "cartpole", "--quick", "--out", work / "results"],
                 work, env, "hlofuse cartpole --quick")
    for expected in ("CartPole on hlofuse", "baseline", "max", "wrote "):
        if expected not in output:
            raise CheckFailed(f"hlofuse cartpole --quick printed no {expected!r}")
    example = work / EXAMPLE.name
    shutil.copy2(EXAMPLE, example)
    output = run([python, example], work, env, f"examples/{EXAMPLE.name}")
    if "matches NumPy" not in output:
        raise CheckFailed(f"examples/{EXAMPLE.name} did not report its check")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true",
                        help="keep the working folder (wheel, venv, results) and print it")
    args = parser.parse_args()
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="hlofuse-wheel-check-"))
    # The compiled-program cache of the installed package: empty, so the C compiler runs.
    env = clean_env(HLOFUSE_CACHE_DIR=str(work / "cache"), MPLBACKEND="Agg")
    try:
        tree = work / "tree"
        copy_tree(tree)
        wheel = build_wheel(tree, work / "dist", env)
        check_wheel_contents(wheel, tree)
        python = install(wheel, work / "venv", env)
        check_installed(python, work / "venv", work / "run", env)
    except CheckFailed as e:
        print(f"wheel check FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"wheel check passed in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
