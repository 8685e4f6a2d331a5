"""Which kernel, and which op in it, computes differently on the TPU from the reference
interpreter: a corpus rollout at N lanes and T steps, fused by --strategy, walked kernel by
kernel as the profile walks it (loops stepping on the host), each kernel run on the chip
and, on the same inputs, by the reference interpreter. The first kernels whose results
differ (integers exactly, floats within rtol 1e-5, atol 1e-6) are listed; for each such
kernel that is not a lane kernel, its fused computation is evaluated op by op with `lax` on
the chip (each op one XLA operation) and by the interpreter, and the first op that differs
on the same inputs is named with a few of its differing values. The JSON is rewritten as
it goes.

    python benchmarks/tpu_kernel_walk.py --program grid_forage --envs 1024 --steps 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.printer import instruction_text
from hlofuse.studies.rollouts_bench import load_programs


def _differs(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return np.ones((1,), bool)
    if want.dtype.kind == "f":
        return ~np.isclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5,
                           atol=1e-6, equal_nan=True)
    return got != want


def _examples(inst: Instruction, ops: list[Any], got: np.ndarray, want: np.ndarray,
              bad: np.ndarray) -> list[dict[str, str]]:
    if bad.shape != got.shape or got.ndim == 0:
        return [{"chip": str(got)[:200], "interpreter": str(want)[:200]}]
    out = []
    for index in np.argwhere(bad)[:4]:
        at = tuple(int(i) for i in index)
        operands = []
        for o in ops:
            a = np.asarray(o)
            operands.append(str(a[at]) if a.shape == bad.shape else
                            (str(a) if a.size <= 4 else f"{a.dtype}{list(a.shape)}"))
        out.append({"at": str(at), "operands": str(operands), "chip": str(got[at]),
                    "interpreter": str(want[at])})
    return out


def _op_by_op(comp: Computation, leaves: list[np.ndarray]) -> dict[str, Any] | None:
    """The first instruction of `comp` whose chip value differs from the interpreter's on the
    interpreter's operands."""
    import jax

    from hlofuse.reference.interpreter import Interpreter
    from hlofuse.targets.tpu.words import WordEvaluator, narrowed, widen

    # As the kernel computes: 8- and 16-bit integers in int32 words (targets/tpu/words.py).
    interpreter, evaluator = Interpreter(), WordEvaluator()
    env: dict[int, Any] = {}
    for inst in comp.instructions:
        ops = [env[id(o)] for o in inst.operands]
        if inst.op is Op.PARAMETER:
            env[id(inst)] = leaves[inst.parameter_number]
            continue
        want = interpreter.evaluate_instruction(inst, ops)
        env[id(inst)] = want
        if isinstance(want, tuple) or inst.op in (Op.TUPLE, Op.GET_TUPLE_ELEMENT):
            continue
        try:
            def one(*a: Any, inst: Instruction = inst) -> Any:
                words = [widen(x, o.dtype) for x, o in zip(a, inst.operands)]
                return narrowed(evaluator.instruction(inst, words), inst.dtype)

            got = np.asarray(jax.jit(one)(*[np.asarray(o) for o in ops]))
        except Exception as e:  # noqa: BLE001 - an op that does not run alone is noted
            return {"instruction": instruction_text(inst)[:300],
                    "error": f"{type(e).__name__}: {str(e)[:200]}"}
        bad = _differs(got, np.asarray(want))
        if bad.any():
            return {"instruction": instruction_text(inst)[:400], "differing": int(bad.sum()),
                    "of": int(bad.size),
                    "examples": _examples(inst, ops, got, np.asarray(want), bad)}
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", default="grid_forage")
    parser.add_argument("--envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--strategy", default="max")
    parser.add_argument("--first", type=int, default=4, help="differing kernels to list")
    parser.add_argument("--interpret", action="store_true", help="Pallas kernels interpreted")
    parser.add_argument("--out", default="results/tpu/kernel_walk.json")
    args = parser.parse_args()

    import jax

    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.ir.parser import parse_module
    from hlofuse.reference.interpreter import Interpreter, flatten_value
    from hlofuse.targets.tpu.program import TpuExecutable, Walker

    f = load_programs(Path("tests/data/rollouts")).ROLLOUTS[args.program](n=args.envs,
                                                                          t=args.steps)
    key = jax.random.PRNGKey(0)
    text = jax.jit(f).trace(key).lower(lowering_platforms=("cpu",)).as_text(dialect="hlo")
    fused = run_strategy(parse_module(text, f"{args.program}.hlo"), args.strategy, debug=False)
    executable = TpuExecutable(fused.module, interpret=args.interpret)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"program": args.program, "lanes": args.envs, "steps": args.steps,
                              "strategy": args.strategy, "kernels_run": 0, "differing": []}
    interpreter = Interpreter()

    def save() -> None:
        out.write_text(json.dumps(record, indent=1) + "\n")

    def call(kernel: Any, leaves: list[Any]) -> list[Any]:
        host = [np.asarray(leaf) for leaf in leaves]
        got = [np.asarray(a) for a in jax.block_until_ready(
            jax.jit(lambda *a: kernel(*a))(*leaves))]
        want = flatten_value(interpreter.evaluate_instruction(kernel.instruction, host))
        record["kernels_run"] += 1
        bad = [_differs(g, w) for g, w in zip(got, want)]
        if any(b.any() for b in bad) and len(record["differing"]) < args.first:
            row: dict[str, Any] = {
                "kernel": kernel.name, "mode": kernel.mode, "layout": kernel.layout,
                "lane_kernel": kernel.lanes is not None, "reason": kernel.reason[:200],
                "outputs_differing": [int(b.sum()) for b in bad],
                "instructions": len(kernel.instructions)}
            if kernel.computation is not None and kernel.lanes is None:
                row["first_op"] = _op_by_op(kernel.computation, host)
            record["differing"].append(row)
            print(json.dumps(row)[:600], flush=True)
        save()
        return [np.asarray(w) for w in want]  # go on from the interpreter's values

    with executable.x64():
        inputs = [np.asarray(a) for a in executable._arguments([np.asarray(key)])]
        Walker(executable.kernel_plans, call, traced=False).run(fused.module.entry, inputs)
    save()
    print(f"{record['kernels_run']} kernels run, {len(record['differing'])} differing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
