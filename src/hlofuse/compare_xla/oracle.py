"""XLA's own GPU compiler as the oracle: compile a program for a named GPU without one.

XLA compiles for an NVIDIA GPU ahead of time from a device description alone ("deviceless"
compilation; see `docs/xla-gpu-oracle.md`). This module asks it for two texts: the
module XLA started from (HLO before optimisation, the input `xla-gpu` is given too) and XLA's
optimised HLO (its fusions and launch sequence), plus the thunk sequence when XLA writes one.

It needs the optional extra `xla-gpu` (jax, jaxlib, the CUDA 12 plugin and nvcc's ptxas and
libdevice), and runs XLA in a child process: JAX must see `JAX_PLATFORMS=cpu` before it is
imported, XLA's C++ logging goes to the child's stderr, and a crash in XLA cannot take the
caller down. The child is this `xla_child.py` run as a script; it answers with one JSON object.

Inputs: an HLO text file, or a Python file defining `program()` that returns `(fn, args)`,
`args` being NumPy arrays or `(shape, dtype)` pairs; `fn` is lowered for CUDA.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlofuse.fusion.xla_gpu.devices import DEFAULT_DEVICE, device
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.passes.call_inliner import CallInliner

EXTRA = "xla-gpu"
_PACKAGES = ("jax", "jaxlib", "jax_cuda12_plugin")
# The XLA commit jaxlib 0.10.2 was built from, for the record of what the oracle is.
XLA_COMMIT = "5a9e73cbd925"
_SDY_ATTRIBUTE = re.compile(r', frontend_attributes=\{xla\.sdy\.[a-z_]+="[^"]*"\}')


class OracleUnavailable(RuntimeError):
    """The optional extra that provides XLA's GPU compiler is not installed."""


class XlaCompileError(RuntimeError):
    """XLA refused the program; the message is XLA's."""


@dataclass(frozen=True, slots=True)
class OracleResult:
    """What XLA made of one program for one device."""

    device: str
    before: str  # the module XLA started from (HLO text)
    optimized: str  # XLA's optimised HLO
    thunks: str  # XLA's thunk (launch) sequence, "" when not written
    jax_version: str


def missing_packages() -> list[str]:
    """The packages of the extra that are not importable here."""
    return [name for name in _PACKAGES if importlib.util.find_spec(name) is None]


def _require_extra() -> None:
    missing = missing_packages()
    if missing:
        raise OracleUnavailable(
            f"comparing with XLA needs XLA's GPU compiler, which comes with the optional extra "
            f"{EXTRA!r} (missing here: {', '.join(missing)}); install it with "
            f"pip install -e '.[{EXTRA}]'")


def prepare_for_xla(text: str, filename: str | None = None) -> str:
    """What XLA is given: `text` with its calls inlined by hlofuse (XLA inlines them first
    too, but under new names; inlined before, XLA's own module before optimisation, which
    `xla-gpu` is then fed, names every instruction as its optimised HLO does), printed by
    hlofuse, without Shardy sharding annotations (their mesh is not printed, and XLA stops
    on a reference to a missing mesh)."""
    module = parse_module(text, filename=filename)
    changed = True
    while changed:
        module, changed = CallInliner().run(module)
    return _SDY_ATTRIBUTE.sub("", module_text(module))


def compile_file(path: Path | str, device_name: str = DEFAULT_DEVICE,
                 timeout: float = 600.0) -> OracleResult:
    """Compile an HLO text file or a `program()` Python file with XLA for `device_name`:
    the program (lowered for CUDA first, for a Python file) goes through `prepare_for_xla`,
    then to XLA."""
    _require_extra()
    chosen = device(device_name)
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no such file")
    with tempfile.TemporaryDirectory(prefix="hlofuse-xla-") as work:
        config = Path(work) / "target_config.txtpb"
        config.write_text(chosen.target_config)
        jax_version = ""
        if source.suffix == ".py":
            lowered = _run_child(["--lower", str(source.resolve())], config, Path(work), timeout)
            text, name, jax_version = str(lowered["before"]), f"{source} (lowered)", \
                str(lowered.get("jax_version", ""))
        else:
            text, name = source.read_text(), str(source)
        prepared = Path(work) / "prepared.hlo"
        prepared.write_text(prepare_for_xla(text, name))
        answer = _run_child([str(prepared)], config, Path(work), timeout)
        return OracleResult(chosen.name, str(answer["before"]), str(answer["optimized"]),
                            str(answer.get("thunks", "")),
                            str(answer.get("jax_version", jax_version)))


def _run_child(arguments: list[str], config: Path, work: Path,
               timeout: float) -> dict[str, Any]:
    out = work / f"answer-{len(list(work.glob('answer-*')))}"
    out.mkdir()
    command = [sys.executable, str(Path(__file__).with_name("xla_child.py")),
               "--target-config", str(config), "--out", str(out), *arguments]
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("XLA_FLAGS", None)  # the same flags as the stored corpus: none
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise XlaCompileError(f"XLA did not finish within {timeout:.0f} s") from exc
    answer = _answer(out / "answer.json")
    if answer is None:
        lines = [line for line in done.stderr.strip().splitlines()
                 if not line.lstrip().startswith("@")]
        tail = "\n".join(lines[-12:])
        raise XlaCompileError(f"XLA stopped without an answer (exit status "
                              f"{done.returncode}):\n{tail}")
    if answer.get("error"):
        raise XlaCompileError(str(answer["error"]))
    return answer


def _answer(path: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


