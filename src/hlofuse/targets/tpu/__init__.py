"""The TPU target: every kernel fusion forms as one Pallas kernel (`pallas_call`), the program
around them one jitted JAX function (`tpu`: on a TPU; `tpu-interpret`: the same kernels with
`interpret=True` on the CPU, as `cuda-emulated` runs the CUDA source without a GPU).

JAX is imported only when the target is used: `unavailable()` names what is missing (JAX
with Pallas, or a TPU). The folder: the opcode table (`lax_ops.py`), the computation
evaluator (`evaluate.py`), kernels and their layouts (`kernels.py`; blocks and the VMEM
model in `blocks.py`, tiled reductions in `reduce_tiled.py`, dynamic-update-slices in place
in `update_in_place.py`), the program and its
executable (`program.py`), and what `--emit` prints (`listing.py`).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from hlofuse.ir.hlo import Module
from hlofuse.runtime.target import Executable, Target, TargetUnavailable, first_line

if TYPE_CHECKING:
    from hlofuse.targets.tpu.program import TpuExecutable

_EMITS = {"pallas": "each kernel as its pallas_call: layout, blocks and the lax ops of its body",
          "mosaic": "each Pallas kernel lowered to Mosaic for the TPU (no TPU needed)"}
_MISSING_JAX = ("JAX with Pallas is not installed: pip install 'hlofuse[tpu]' (jax, jaxlib; "
                "libtpu on a TPU machine)")


def jax_missing() -> str | None:
    """Why JAX cannot be used here, or None."""
    if importlib.util.find_spec("jax") is None:
        return _MISSING_JAX
    try:
        importlib.import_module("jax.experimental.pallas")
    except ImportError as e:
        return f"{_MISSING_JAX} ({e})"
    return None


def tpu_missing() -> str | None:
    """Why no TPU can run kernels here (JAX missing, or no TPU device), or None."""
    reason = jax_missing()
    if reason is not None:
        return reason
    import jax

    try:
        devices = jax.devices("tpu")
    except RuntimeError:
        devices = []
    if not devices:
        return ("no TPU device here: run on a TPU machine, use --backend tpu-interpret to run "
                "the same kernels on the CPU, or `compile --emit mosaic` to lower them")
    return None


class _PallasTarget(Target):
    emits = _EMITS
    default_emit = "pallas"
    interpret = False
    # Programs compiled in this process, by cache key: compiled once per process (JAX's
    # persistent compilation cache keeps the XLA executables across processes).
    _programs: dict[str, Executable] = {}

    def emit_unavailable(self) -> str | None:
        return jax_missing()

    def emit(self, module: Module, what: str) -> str:
        from hlofuse.targets.tpu.listing import mosaic_listing, pallas_listing
        from hlofuse.targets.tpu.program import plan_kernels, uses_wide_types

        _need(jax_missing())
        kernels = plan_kernels(module, self.interpret)
        if what == "mosaic":
            return mosaic_listing(kernels, uses_wide_types(module))
        return pallas_listing(kernels)

    def compile(self, module: Module) -> Executable:
        _need(self.unavailable())
        _persistent_cache()
        return self._compiled(module)

    def _compiled(self, module: Module) -> TpuExecutable:
        from hlofuse.targets.tpu.program import TpuExecutable

        executable = TpuExecutable(module, self.interpret)
        if self.interpret:
            executable.compile()
            return executable
        try:
            executable.compile()
        except Exception as e:  # noqa: BLE001 - Mosaic's errors have no common type
            # A kernel Mosaic refuses on the chip (a layout, a size): find which, run those
            # as XLA operations (the listing says why), and compile the program again. Said
            # on stderr: it compiles every kernel once more (minutes for hundreds).
            first = first_line(e)[:200]
            print(f"hlofuse tpu: the program did not compile ({first}); compiling its "
                  "Pallas kernels one at a time to find the refused ones", file=sys.stderr,
                  flush=True)
            start = time.perf_counter()
            refused = executable.check_kernels_on_chip()
            print(f"hlofuse tpu: {len(refused)} kernel(s) refused in "
                  f"{time.perf_counter() - start:.1f} s: {', '.join(refused)}",
                  file=sys.stderr, flush=True)
            executable.compile()
        return executable

    def load_program(self, key: str, fused: Callable[[], Module]) -> Executable | None:
        return self._programs.get(key)

    def save_program(self, key: str, executable: Executable,
                     facts: Mapping[str, object]) -> None:
        self._programs[key] = executable


class TpuTarget(_PallasTarget):
    name = "tpu"
    summary = "Pallas kernels (pallas_call) in one jitted JAX program, run on a TPU"

    def unavailable(self) -> str | None:
        return tpu_missing()


class InterpretTpuTarget(_PallasTarget):
    name = "tpu-interpret"
    summary = "the TPU target's Pallas kernels run with interpret=True on the CPU"
    interpret = True

    def unavailable(self) -> str | None:
        return jax_missing()


def _need(reason: str | None) -> None:
    if reason is not None:
        raise TargetUnavailable(reason)


_cache_set = False


def _persistent_cache() -> None:
    """Point JAX's persistent compilation cache into hlofuse's cache directory (once)."""
    global _cache_set
    if _cache_set:
        return
    _cache_set = True
    import jax

    from hlofuse.toolchain.cache import default_cache_dir

    try:
        if getattr(jax.config, "jax_compilation_cache_dir", None) is None:
            path = default_cache_dir() / "jax"
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            jax.config.update("jax_compilation_cache_dir", str(path))
            # Kernels compile in well under JAX's default one second; a profile and a study
            # compile the same kernel many times (a loop unrolled ten times), so keep them all.
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    except (OSError, AttributeError):
        pass  # no cache: every process compiles again
