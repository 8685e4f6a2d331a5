"""The BLAS the C runtime library calls for f32 and f64 dots: the OpenBLAS of the
`scipy-openblas32` wheel, found at run time through the package (its header, library folder
and library name), as XLA's CPU backend calls Eigen for the dots it does not write as loops.

Without the package (or with HLOFUSE_BLAS=0 in the environment) the runtime library is built
without BLAS and every dot runs the runtime's loop (`hlofuse_rt.c`); `dot_implementation`
says which a dot gets, for explain and profile.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction

PACKAGE = "scipy_openblas32"
DISTRIBUTION = "scipy-openblas32"
# f16 and bf16 dots compute with the f32 routine (codegen/kernel.py) and round once after.
_GEMM = {DType.F32: "sgemm", DType.F64: "dgemm", DType.F16: "sgemm", DType.BF16: "sgemm"}
# HLOFUSE_BLAS_MIN_WORK of hlofuse_rt.c: products of fewer multiply-adds keep the loop.
BLAS_MIN_WORK = 16384


@dataclass(frozen=True)
class Blas:
    """Where the runtime library finds the BLAS, and what identifies that build."""

    include_dir: str
    lib_dir: str
    library: str  # the name after -l
    identity: str  # package version and OpenBLAS's configuration (version, kernel, threads)

    def build_flags(self) -> tuple[str, ...]:
        """The runtime library's extra flags: the header, the library (kept even where the
        linker drops libraries not yet needed: the runtime's source comes after the flags),
        and the library folder as the run-time search path."""
        return ("-DHLOFUSE_BLAS", f"-I{self.include_dir}", f"-L{self.lib_dir}",
                "-Wl,--no-as-needed", f"-l{self.library}", f"-Wl,-rpath,{self.lib_dir}")


@functools.cache
def find_blas() -> Blas | None:
    """The wheel's OpenBLAS, or None where the package is missing, broken or turned off."""
    if os.environ.get("HLOFUSE_BLAS", "1") == "0":
        return None
    try:
        package = importlib.import_module(PACKAGE)
        from importlib.metadata import version

        config = str(package.get_openblas_config())
        identity = f"{DISTRIBUTION} {version(DISTRIBUTION)}: {config}"
        return Blas(str(package.get_include_dir()), str(package.get_lib_dir()),
                    str(package.get_library()), identity)
    except (ImportError, OSError, AttributeError):
        return None


def identity_comment(blas: Blas | None) -> str:
    """A C comment naming the BLAS build, for the runtime library's source (and so its cache
    key): letters, digits and a few separators only."""
    if blas is None:
        return "/* BLAS: none */\n"
    return "/* BLAS: " + re.sub(r"[^A-Za-z0-9 .:=_-]", "_", blas.identity) + " */\n"


def dot_implementation(dtype: DType, blas: Blas | None = None, work: int | None = None) -> str:
    """What computes a dot of `dtype` that is a kernel of its own on the C target, with `work`
    multiply-adds per product where known (a layout that is no GEMM, with an operand's rows
    and columns both strided, also takes the loop)."""
    routine = _GEMM.get(dtype)
    if routine is None:
        return f"the runtime's loop ({dtype.value} has no BLAS routine)"
    if blas is None:
        return ("the runtime's loop (no BLAS: scipy-openblas32 is not installed, or "
                "HLOFUSE_BLAS=0)")
    if work is not None and work < BLAS_MIN_WORK:
        return (f"the runtime's loop ({work} multiply-adds per product, under the "
                f"{BLAS_MIN_WORK} worth a call to {routine})")
    return f"OpenBLAS {routine} ({DISTRIBUTION})"


def _work(dot: Instruction) -> int:
    """Multiply-adds per product of a dot: its result's elements per batch entry times the
    contracting size."""
    lhs = dot.operands[0].shape.dims
    batch = math.prod(lhs[d] for d in dot.ints("lhs_batch_dims"))
    contracting = math.prod(lhs[d] for d in dot.ints("lhs_contracting_dims"))
    return dot.shape.num_elements // max(batch, 1) * contracting


def dot_kernel_lines(dots: Iterable[Instruction]) -> list[str]:
    """A line per dot that is a kernel of its own: its name, type and what computes it on the
    C target (explain; a dot fused into lane code is computed there instead)."""
    blas = find_blas()
    return [f"%{dot.name} {dot.dtype.value}[{','.join(map(str, dot.shape.dims))}]: "
            f"{dot_implementation(dot.dtype, blas, _work(dot))}" for dot in dots]


def profile_note() -> str:
    """What the dot kernels of a C profile ran."""
    blas = find_blas()
    if blas is None:
        return f"dot kernels: {dot_implementation(DType.F32, None)}"
    return (f"dot kernels: f32 and f64 (f16 and bf16 through f32) call OpenBLAS ({blas.identity})"
            f" from {BLAS_MIN_WORK} multiply-adds per product; other dtypes, smaller products "
            "and layouts that are no GEMM run the runtime's loop")
