"""`hlofuse run` (parse, verify, compile or interpret, print the outputs) and `hlofuse fmt`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from hlofuse import targets
from hlofuse.cli.errors import EXIT_OK, UsageError, load_module, one_line
from hlofuse.ir.hlo import Module
from hlofuse.ir.printer import module_text
from hlofuse.ir.shapes import Shape
from hlofuse.reference.interpreter import InterpreterError, coerce_argument

if TYPE_CHECKING:
    from hlofuse.api import Compiled


def random_inputs(module: Module, seed: int) -> list[np.ndarray]:
    """Deterministic random arguments for every entry parameter."""
    rng = np.random.default_rng(seed)
    out = []
    for shape in module.parameter_shapes:
        out.append(random_array(shape, rng))
    return out


def random_array(shape: Shape, rng: np.random.Generator) -> np.ndarray:
    if not shape.is_array:
        raise UsageError(f"cannot make a random argument of shape {shape.text(False)}")
    dtype = shape.dtype
    if dtype.is_pred:
        return rng.random(shape.dims) < 0.5
    if dtype.is_float:
        return rng.standard_normal(shape.dims).astype(dtype.numpy)
    low = 0 if dtype.is_unsigned_int else -10
    return rng.integers(low, 11, size=shape.dims).astype(dtype.numpy)


def load_inputs(path: str, module: Module) -> list[np.ndarray]:
    try:
        data = np.load(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, ValueError, EOFError) as e:
        raise UsageError(f"{path}: not a readable .npz file ({e})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise UsageError(f"{path}: not an .npz archive of arg0, arg1, ...")
    inputs = []
    for i, shape in enumerate(module.parameter_shapes):
        key = f"arg{i}"
        if key not in data.files:
            raise UsageError(f"{path}: missing input '{key}' for parameter {i} "
                             f"({shape.text(False)})")
        try:
            array = data[key]
        except (OSError, ValueError, EOFError) as e:
            raise UsageError(f"{path}: cannot read '{key}' ({e})") from None
        if shape.is_array and shape.dtype.numpy.name == "bfloat16" and array.dtype == np.uint16:
            array = array.view(shape.dtype.numpy)  # npz has no bf16: its bits come as uint16
        inputs.append(array)
    return inputs


def summarize(array: np.ndarray) -> str:
    if array.size == 0:
        return "(empty)"
    if array.dtype == np.bool_:
        return f"true: {int(array.sum())} of {array.size}"
    values = array.astype(np.float64)
    finite = values[np.isfinite(values)]
    head = np.array2string(array.ravel()[:4], separator=", ", precision=5)
    if finite.size == 0:
        return f"first {head}"
    return (f"min {finite.min():.6g}, max {finite.max():.6g}, mean {finite.mean():.6g}, "
            f"first {head}")


def print_outputs(outputs: list[np.ndarray]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="outputs")
    for column in ("name", "shape", "dtype", "summary"):
        table.add_column(column)
    for i, array in enumerate(outputs):
        table.add_row(f"out{i}", str(list(array.shape)), str(array.dtype), summarize(array))
    Console().print(table)


def _storable(array: np.ndarray) -> np.ndarray:
    """npz has no bf16: such outputs are written as their uint16 bit patterns."""
    return array.view(np.uint16) if array.dtype.name == "bfloat16" else array


def _compile(module: Module, strategy: str, backend: str, path: str) -> Compiled:
    from hlofuse.api import compile_module  # api imports every layer; only `run` needs it
    from hlofuse.fusion.strategies import StrategyError
    from hlofuse.runtime.target import CodegenError, TargetUnavailable
    from hlofuse.toolchain import CompileError, ToolchainError

    try:
        return compile_module(module, strategy, backend)
    except StrategyError as e:
        raise UsageError(f"--strategy: {e}") from None
    except CompileError as e:
        raise UsageError(f"{path}: the C compiler failed: {one_line(str(e))}") from None
    except CodegenError as e:
        raise UsageError(f"{path}: cannot compile: {one_line(str(e))}") from None
    except (ToolchainError, TargetUnavailable) as e:  # no nvcc for --backend cuda
        raise UsageError(f"{path}: {one_line(str(e))}") from None


def cmd_run(args: argparse.Namespace) -> int:
    module, _ = load_module(args.file)
    if args.inputs:
        inputs = load_inputs(args.inputs, module)
    else:
        inputs = random_inputs(module, args.random_inputs)
    if args.profile and args.backend not in targets.names(compiled_only=True):
        raise UsageError(f"--profile needs a compiled backend "
                         f"({', '.join(targets.names(compiled_only=True))})")
    try:
        inputs = [coerce_argument(a, p.shape, i)
                  for i, (a, p) in enumerate(zip(inputs, module.entry.parameters, strict=False))]
    except TypeError as e:
        raise UsageError(f"{args.file}: {e}") from None
    compiled = _compile(module, args.strategy, args.backend, args.file)
    from hlofuse.runtime.target import TargetUnavailable
    from hlofuse.toolchain import ToolchainError

    try:
        outputs = compiled.run_flat(inputs)
        profile = compiled.profile(*inputs) if args.profile else None
    except (TypeError, ValueError, InterpreterError, ToolchainError,
            TargetUnavailable) as e:  # ...: no GPU
        raise UsageError(f"{args.file}: {one_line(str(e))}") from None
    print_outputs(outputs)
    if profile is not None:
        print(profile)
    if args.out:
        try:
            # Any: numpy's stub types every keyword like its `allow_pickle` flag.
            arrays: dict[str, Any] = {f"out{i}": _storable(a) for i, a in enumerate(outputs)}
            np.savez(args.out, **arrays)
        except OSError as e:
            raise UsageError(f"{args.out}: cannot write: {e.strerror or e}") from None
    return EXIT_OK


def cmd_fmt(args: argparse.Namespace) -> int:
    module, _ = load_module(args.file)
    sys.stdout.write(module_text(module))
    return EXIT_OK


def add_run_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="parse, verify and evaluate an HLO module")
    p.add_argument("file", help="HLO text file")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--inputs", help=".npz with arg0, arg1, ... in parameter order "
                       "(bf16 as uint16 bit patterns)")
    group.add_argument("--random-inputs", type=int, default=0, metavar="SEED",
                       help="random arguments from this seed (default 0)")
    p.add_argument("--out", help="write outputs as out0, out1, ... to this .npz (bf16 as "
                   "uint16 bit patterns)")
    p.add_argument("--strategy", default="xla",
                   help="fusion strategy: none, xla, priority, max, or modifiers such as "
                   "xla+relax_concatenate (default xla)")
    p.add_argument("--backend", choices=targets.names(), default=targets.names()[0],
                   help=f"where to run: {targets.help_text()}")
    p.add_argument("--profile", action="store_true",
                   help="print per-kernel calls, time, bytes and share of the run")
    p.set_defaults(handler=cmd_run)


def add_fmt_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fmt", help="print an HLO module in canonical form")
    p.add_argument("file", help="HLO text file")
    p.set_defaults(handler=cmd_fmt)
