"""The `hlofuse` command line: run, fmt, and the commands later layers add.

Bad input never produces a traceback: one line on standard error starting `error:` that names
the file, line and column, and exit status 2.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from pathlib import Path

import numpy as np

from hlofuse.studies.commands import add_cartpole_command

if TYPE_CHECKING:
    from hlofuse.api import Compiled
from hlofuse.fusion.commands import add_explain_command, add_opt_command
from hlofuse.interpreter import (InterpreterError, Value, coerce_argument, evaluate,
                                 flatten_value)
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import HloParseError, parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.shapes import Shape
from hlofuse.ir.verifier import HloVerifyError, verify
from hlofuse.runtime.commands import add_compile_command
from hlofuse.studies.peers.commands import add_bench_command
from hlofuse.toolchain.commands import add_cache_command

EXIT_OK = 0
EXIT_BAD_INPUT = 2


class UsageError(Exception):
    """Bad input found by a command: printed as `error: ...`, exit status 2."""


def _one_line(message: str) -> str:
    return message.splitlines()[0] if message else message


def load_module(path: str) -> tuple[Module, str]:
    """Parse and verify a file; errors name the file, line and column."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1
        line = data.count(b"\n", 0, e.start) + 1
        column = len(data[line_start:e.start].decode("utf-8")) + 1
        raise UsageError(f"{path}:{line}:{column}: the file is not UTF-8 text") from None
    try:
        module = parse_module(text, path)
    except HloParseError as e:
        raise UsageError(_one_line(str(e))) from None
    try:
        verify(module)
    except HloVerifyError as e:
        raise UsageError(f"{_definition_site(path, text, e.instruction)}: {e}") from None
    return module, text


def _definition_site(path: str, text: str, name: str | None) -> str:
    """`file:line:col` where instruction `name` is defined, or just the file."""
    if name:
        # Point at the name, as the parser's errors do (not at ROOT or a preceding blank line).
        pattern = re.compile(r"^[ \t]*(?:ROOT[ \t]+)?(%?" + re.escape(name) + r")[ \t]*=", re.M)
        m = pattern.search(text)
        if m:
            start = m.start(1)
            line = text.count("\n", 0, start) + 1
            column = start - (text.rfind("\n", 0, start) + 1) + 1
            return f"{path}:{line}:{column}"
    return f"{path}:1:1"


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


def _evaluate(module: Module, inputs: list[np.ndarray], path: str) -> Value:
    try:
        return evaluate(module, inputs)
    except TypeError as e:
        raise UsageError(f"{path}: {e}") from None
    except InterpreterError as e:
        raise UsageError(f"{path}: {e}") from None


def _storable(array: np.ndarray) -> np.ndarray:
    """npz has no bf16: such outputs are written as their uint16 bit patterns."""
    return array.view(np.uint16) if array.dtype.name == "bfloat16" else array


def _compile(module: Module, strategy: str, backend: str, path: str) -> Compiled:
    from hlofuse.api import compile_module  # api imports every layer; only `run` needs it
    from hlofuse.fusion.strategies import StrategyError
    from hlofuse.runtime import CodegenError
    from hlofuse.toolchain import CompileError

    try:
        return compile_module(module, strategy, backend)
    except StrategyError as e:
        raise UsageError(f"--strategy: {e}") from None
    except CompileError as e:
        raise UsageError(f"{path}: the C compiler failed: {_one_line(str(e))}") from None
    except CodegenError as e:
        raise UsageError(f"{path}: cannot compile: {_one_line(str(e))}") from None


def cmd_run(args: argparse.Namespace) -> int:
    module, _ = load_module(args.file)
    if args.inputs:
        inputs = load_inputs(args.inputs, module)
    else:
        inputs = random_inputs(module, args.random_inputs)
    if args.profile and args.backend != "cpu":
        raise UsageError("--profile needs --backend cpu")
    try:
        inputs = [coerce_argument(a, p.shape, i)
                  for i, (a, p) in enumerate(zip(inputs, module.entry.parameters))]
    except TypeError as e:
        raise UsageError(f"{args.file}: {e}") from None
    compiled = _compile(module, args.strategy, args.backend, args.file)
    try:
        outputs = compiled.run_flat(inputs)
        profile = compiled.profile(*inputs) if args.profile else None
    except (TypeError, ValueError, InterpreterError) as e:
        raise UsageError(f"{args.file}: {_one_line(str(e))}") from None
    print_outputs(outputs)
    if profile is not None:
        print(profile)
    if args.out:
        try:
            np.savez(args.out, **{f"out{i}": _storable(a) for i, a in enumerate(outputs)})
        except OSError as e:
            raise UsageError(f"{args.out}: cannot write: {e.strerror or e}") from None
    return EXIT_OK


def cmd_fmt(args: argparse.Namespace) -> int:
    module, _ = load_module(args.file)
    sys.stdout.write(module_text(module))
    return EXIT_OK


def _add_run(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
    p.add_argument("--backend", choices=("cpu", "interpreter"), default="cpu",
                   help="run compiled C kernels (default) or the reference interpreter")
    p.add_argument("--profile", action="store_true",
                   help="print per-kernel calls, time, bytes and share of the run")
    p.set_defaults(handler=cmd_run)


def _add_fmt(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("fmt", help="print an HLO module in canonical form")
    p.add_argument("file", help="HLO text file")
    p.set_defaults(handler=cmd_fmt)


# Each entry adds one subcommand; later layers append theirs here.
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [  # type: ignore[type-arg]
    _add_run,
    _add_fmt,
    add_cartpole_command,
    add_opt_command,
    add_explain_command,
    add_compile_command,
    add_cache_command,
    add_bench_command,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hlofuse", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: int = args.handler(args)
        return result
    except UsageError as e:
        print(f"error: {_one_line(str(e))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (HloParseError, HloVerifyError) as e:
        print(f"error: {_one_line(str(e))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
