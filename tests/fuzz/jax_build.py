"""A fuzz program as a JAX function, and JAX's answers for it (the oracle).

JAX runs with 64-bit types enabled so that s64, u64 and f64 programs can be written; every
type is explicit in the program, so nothing depends on JAX's defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tests.fuzz.program import FLUSHED_TINY, TRIG_LIMIT, Block, Program, Step, Value, np_dtype

_jax: Any = None


def jax_modules() -> tuple[Any, Any, Any]:
    """(jax, jax.numpy, jax.lax), imported once with 64-bit types on."""
    global _jax
    if _jax is None:
        import os
        import sys

        # The oracle is XLA's CPU code for the program as written. XLA's constant folder has
        # bugs of its own (count-leading-zeros of a negative s8/s16/s32 constant folds to a
        # negative number, where its CPU code gives 0) and its algebraic simplifier rewrites
        # values (exp(a) / exp(b) to exp(a - b): inf / inf becomes 1, not NaN; max(x, x) to x),
        # so both are off. Only possible before JAX starts its backend.
        # XLA also allows excess precision by default: it removes the f32 -> bf16 -> f32
        # conversions around a bf16 dot computed in f32, so the dot's bf16 result is never
        # rounded (seed 7461); HLO's meaning, which hlofuse follows, rounds it.
        # The host's instruction set changes XLA's answers: where it has FMA, LLVM contracts
        # `x + x * x` into one fused multiply-add in some shapes (XLA allows contraction always;
        # seed 15455, f32[8,2,7]), and where it has AVX512-BF16, a bf16 value that is only
        # moved (a broadcast, a dynamic-slice) goes through its f32 -> bf16 instruction, which
        # flushes denormals (seeds 11944, 14306). HLO's meaning, which hlofuse follows, rounds
        # every operation once and moves bits unchanged, so the oracle is XLA's code for AVX.
        flags = ("--xla_disable_hlo_passes=constant_folding,algsimp",
                 "--xla_allow_excess_precision=false", "--xla_cpu_max_isa=AVX")
        for flag in flags:
            if "jax" not in sys.modules and flag not in os.environ.get("XLA_FLAGS", ""):
                os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
        import jax

        jax.config.update("jax_enable_x64", True)  # type: ignore[no-untyped-call]
        jax.config.update("jax_platforms", "cpu")  # type: ignore[no-untyped-call]
        _jax = jax
    import jax.numpy as jnp
    from jax import lax

    return _jax, jnp, lax


def _unary(op: str, x: Any, dtype: str) -> Any:
    _, jnp, lax = jax_modules()
    if op in ("sin", "cos", "tan"):
        limit = np.asarray(TRIG_LIMIT[dtype], np_dtype(dtype))
        x = lax.clamp(-limit, x, limit)
    if (op == "cbrt" and dtype in ("float32", "bfloat16")) or (
            op == "log" and dtype in FLUSHED_TINY):
        # XLA's CPU cbrt answers -5.6e-16 (bits 0xa6214518) for every f32 denormal, of either
        # sign (seed 1097); its log answers log(2^-150) = -103.97 for a positive f32 denormal
        # and NaN for a negative one in some elements of an array and -inf (the log of the
        # zero DAZ reads) in others, by the element's position in XLA's vector loop (seed
        # 5863; measured: f32[5] gives -103.97, f32[4] -inf). Faults of its own under DAZ,
        # not copied; denormals go in as the zeros DAZ reads them as (|x| < smallest normal
        # is true for them under DAZ).
        x = _denormals_as_zeros(x)
    if op in ("expm1", "sin", "tan", "tanh"):
        # XLA's approximations return a denormal argument of these unchanged (measured: f32,
        # bf16, and f64 except tanh), where hlofuse computes them from the zero DAZ reads; the
        # harness takes both answers as equal (below the smallest normal), but a later
        # operation can tell them apart (pow(expm1(x), expm1(x)) of a negative denormal is NaN
        # in XLA, 1 here; seed 7962), so denormals go in as zeros.
        x = _denormals_as_zeros(x)
    table: dict[str, Callable[[Any], Any]] = {
        "neg": lax.neg, "abs": lax.abs, "floor": lax.floor, "ceil": lax.ceil,
        "round_afz": lambda a: lax.round(a, lax.RoundingMethod.AWAY_FROM_ZERO),
        "round_even": lambda a: lax.round(a, lax.RoundingMethod.TO_NEAREST_EVEN),
        "sqrt": lax.sqrt, "sign": lax.sign, "exp": lax.exp, "expm1": lax.expm1,
        "log": lax.log, "log1p": lax.log1p, "rsqrt": lax.rsqrt, "cbrt": lax.cbrt,
        "tanh": lax.tanh, "logistic": lax.logistic, "sin": lax.sin, "cos": lax.cos,
        "tan": lax.tan, "erf": lax.erf, "not": lax.bitwise_not, "popcnt": lax.population_count,
        "clz": lax.clz, "is_finite": lax.is_finite,
    }
    return table[op](x)


def _denormals_as_zeros(x: Any) -> Any:
    """`x` with its denormals replaced by the zeros DAZ reads them as (of their sign)."""
    _, jnp, lax = jax_modules()
    tiny = FLUSHED_TINY.get(np.dtype(x.dtype).name)
    if tiny is None:
        return x
    return lax.select(lax.lt(lax.abs(x), jnp.full_like(x, tiny)), lax.mul(x, jnp.zeros_like(x)),
                      x)


def _bitcast(x: Any, target: str) -> Any:
    """bitcast-convert to `target`; a denormal it would make is the zero DAZ reads it as.

    A compiler that knows the integer while compiling (a constant; `x / x` that gcc proves
    is 1, seed 5302) evaluates the float arithmetic after the bitcast in IEEE arithmetic,
    where the run-time code reads a denormal as zero (XLA: LLVM's folder, seeds 10276 and
    15307; hlofuse's gcc did until a bitcast's bits were hidden from it). Which answer XLA gives
    depends on how far its folder goes, so denormals enter programs only through their
    parameters, which no compiler sees. The test
    and the replacement are integer operations, unlike `_denormals_as_zeros`: XLA computes a
    bf16 select in f32, which would drop the payload of a NaN the bitcast made (seed 11944).
    """
    _, jnp, lax = jax_modules()
    if target not in FLUSHED_TINY:
        return lax.bitcast_convert_type(x, np_dtype(target))
    width = np_dtype(target).itemsize * 8
    unsigned = np.dtype(f"uint{width}")
    mantissa = np.finfo(np.float32 if target == "bfloat16" else np_dtype(target)).nmant
    exponent_mask = ((1 << (width - 1)) - 1) & ~((1 << mantissa) - 1)
    u = lax.bitcast_convert_type(x, unsigned)

    def masked(mask: int) -> Any:
        return lax.bitwise_and(u, jnp.full_like(u, mask))

    zero = jnp.zeros_like(u)
    denormal = lax.bitwise_and(lax.eq(masked(exponent_mask), zero),
                               lax.ne(masked((1 << mantissa) - 1), zero))
    signed_zero = masked(1 << (width - 1))
    return lax.bitcast_convert_type(lax.select(denormal, signed_zero, u), np_dtype(target))


def _binary(op: str, a: Any, b: Any, shape: tuple[int, ...]) -> Any:
    _, jnp, lax = jax_modules()
    if op in ("max", "min") and a is b:
        # LLVM folds max(x, x) to x, keeping a denormal x that the max instruction, under DAZ,
        # flushes (seed 7224): which one XLA gives depends on its rewrites, so such an x goes
        # in as the zero DAZ reads.
        a = b = _denormals_as_zeros(a)
    a, b = jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)
    if op == "atan2":
        # atan2(+-0, +-0) is left out: XLA's CPU code answers 0 in some fusions, NaN in others.
        both_zero = lax.bitwise_and(lax.eq(a, jnp.zeros_like(a)), lax.eq(b, jnp.zeros_like(b)))
        b = lax.select(both_zero, jnp.ones_like(b), b)
    table: dict[str, Callable[[Any, Any], Any]] = {
        "add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
        "max": lax.max, "min": lax.min, "pow": lax.pow, "atan2": lax.atan2,
        "and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
        "shl": lax.shift_left, "shr_logical": lax.shift_right_logical,
        "shr_arith": lax.shift_right_arithmetic,
        "eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge,
    }
    return table[op](a, b)


# Finite dot operands are clamped to these magnitudes (infinities and NaN kept), so no
# product or partial sum of finite values overflows. Where one does, XLA's CPU dot answers by
# its summation order, which depends on the shapes (measured, f32, seed 6468): one sequence of
# fused multiply-adds for vector-matrix products and 9x9x9 or 64x64x64 matrices (hlofuse's
# order, interpreter_dot.py), separately rounded products added a pair of contracting
# positions at a time for 3x8x8 or 3x300x8, even and odd positions apart for matrix-vector
# products: inf in one order is NaN (inf - inf) in another.
DOT_OPERAND_LIMIT = {"float32": 2.0**60, "bfloat16": 2.0**60, "float64": 2.0**500}


def _below_overflow(x: Any) -> Any:
    _, jnp, lax = jax_modules()
    limit = DOT_OPERAND_LIMIT.get(np.dtype(x.dtype).name)
    if limit is None:
        return x
    bound = jnp.full_like(x, limit)
    return lax.select(lax.is_finite(x), lax.clamp(-bound, x, bound), x)


def _reduce(kind: str, x: Any, axes: tuple[int, ...]) -> Any:
    _, jnp, lax = jax_modules()
    dtype = np.dtype(x.dtype)
    if kind == "argmax":
        return lax.argmax(x, axes[0], np.int32)
    if kind in ("any", "all"):
        return lax.reduce(x, np.bool_(kind == "all"),
                          lax.bitwise_or if kind == "any" else lax.bitwise_and, axes)
    if kind == "sum":
        return lax.reduce(x, np.zeros((), dtype), lax.add, axes)
    if kind == "prod":
        return lax.reduce(x, np.ones((), dtype), lax.mul, axes)
    if dtype.kind == "f" or dtype.name == "bfloat16":
        init = np.asarray(-np.inf if kind == "max" else np.inf, dtype)
        if all(x.shape[a] == 1 for a in axes):
            # A max/min over size-1 dimensions keeps a denormal where XLA's simplifier makes
            # it a reshape (its default pipeline, and hlofuse) and flushes it in the oracle,
            # whose simplifier is off, when the reduce has a kernel of its own (seed 7717).
            x = _denormals_as_zeros(x)
    else:
        info = np.iinfo(dtype)
        init = np.asarray(info.min if kind == "max" else info.max, dtype)
    return lax.reduce(x, init, lax.max if kind == "max" else lax.min, axes)


def _random(step: Step, key_data: Any) -> Any:
    jax, jnp, lax = jax_modules()
    key = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    kind, shape, dtype = step.params["kind"], step.params["shape"], np_dtype(
        step.params["dtype"])
    if kind == "bits":
        return jax.random.bits(key, shape, dtype)
    if kind == "uniform":
        return jax.random.uniform(key, shape, dtype)
    if kind == "normal":
        return jax.random.normal(key, shape, dtype)
    if kind == "split":
        return jax.random.key_data(jax.random.split(key)[1])
    if kind == "split_many":  # a key per lane, as a rollout's reset draws them
        return jax.random.key_data(jax.random.split(key, step.params["count"]))
    return jax.random.key_data(jax.random.fold_in(key, step.params["data"]))


def _indexing(step: Step, a: list[Any]) -> list[Any]:
    _, jnp, lax = jax_modules()
    kind, x = step.params["kind"], a[0]
    if kind == "take":
        return [jnp.take(x, a[1], axis=0, mode="clip")]
    if kind == "sort":
        return [jnp.sort(x, axis=-1)]
    if kind == "argsort":
        return [jnp.argsort(x, axis=-1, stable=True).astype(np.int32)]
    if kind == "top_k":
        values, indices = lax.top_k(x, step.params["k"])
        return [values, indices.astype(np.int32)]
    if kind in ("scatter_set", "scatter_add"):
        positions = np.asarray(step.params["positions"], np.int32)
        at = x.at[positions]
        return [at.set(a[1]) if kind == "scatter_set" else at.add(a[1])]
    if kind == "cumsum":
        return [lax.cumsum(x, axis=0)]
    if kind == "cummax":
        return [lax.cummax(x, axis=0)]
    return [lax.reduce_precision(x, step.params["exponent"], step.params["mantissa"])]


def _run_block(block: Block, ins: Sequence[Any], outer: Sequence[Any]) -> list[Any]:
    env = [*ins, *[outer[c] for c in block.captures]]
    run_steps(block.steps, env)
    return [env[i] for i in block.outputs]


def _pred(p: Any) -> Any:
    _, jnp, lax = jax_modules()
    return lax.reduce(p, np.bool_(False), lax.bitwise_or, tuple(range(p.ndim))) if p.ndim else p


def apply_step(step: Step, env: list[Any]) -> list[Any]:
    """The step's results (one, or several for control flow) from the values in `env`."""
    jax, jnp, lax = jax_modules()
    a = [env[i] for i in step.args]
    p = step.params
    out: Value = step.out
    op = step.op
    if op in ("neg", "abs", "floor", "ceil", "round_afz", "round_even", "sqrt", "sign", "exp",
              "expm1", "log", "log1p", "rsqrt", "cbrt", "tanh", "logistic", "sin", "cos",
              "tan", "erf", "not", "popcnt", "clz", "is_finite") and len(a) == 1:
        return [_unary(op, a[0], str(a[0].dtype))]
    if len(a) == 2 and op in ("add", "sub", "mul", "div", "rem", "max", "min", "pow", "atan2",
                              "and", "or", "xor", "shl", "shr_logical", "shr_arith"):
        return [_binary(op, a[0], a[1], out.shape)]
    if op == "compare":
        return [_binary(p["direction"], a[0], a[1], out.shape)]
    if op == "select":
        pred, x, y = a
        return [lax.select(jnp.broadcast_to(pred, x.shape) if pred.ndim == 0 else pred, x, y)]
    if op == "clamp":
        low, x, high = a
        if low is x or x is high or low is high:  # max(x, x) inside: see _binary
            low, x, high = (_denormals_as_zeros(v) for v in (low, x, high))
        return [lax.clamp(low, x, high)]
    if op == "convert":
        return [lax.convert_element_type(a[0], np_dtype(p["dtype"]))]
    if op == "bitcast":
        return [_bitcast(a[0], p["dtype"])]
    if op == "broadcast":
        return [lax.broadcast_in_dim(a[0], p["shape"], p["dims"])]
    if op == "reshape":
        return [lax.reshape(a[0], p["shape"])]
    if op == "transpose":
        return [lax.transpose(a[0], p["perm"])]
    if op == "slice":
        return [lax.slice(a[0], p["starts"], p["limits"], p["strides"])]
    if op == "concatenate":
        return [lax.concatenate(a, p["axis"])]
    if op == "pad":
        return [lax.pad(a[0], a[1], p["config"])]
    if op == "reverse":
        return [lax.rev(a[0], p["dims"])]
    if op == "iota":
        return [lax.broadcasted_iota(np_dtype(p["dtype"]), p["shape"], p["dim"])]
    if op == "constant":
        return [jnp.asarray(p["value"])]
    if op == "dynamic_slice":
        return [lax.dynamic_slice(a[0], [a[1]] * a[0].ndim, p["sizes"])]
    if op == "dynamic_update_slice":
        return [lax.dynamic_update_slice(a[0], a[1], [a[2]] * a[0].ndim)]
    if op == "reduce":
        return [_reduce(p["kind"], a[0], p["axes"])]
    if op == "dot":
        lhs, rhs = _below_overflow(a[0]), _below_overflow(a[1])
        if p.get("batched"):
            numbers = (((2,), (1,)), ((0,), (0,)))
            return [lax.dot_general(lhs, rhs, numbers, precision=lax.Precision.HIGHEST)]
        return [lax.dot(lhs, rhs, precision=lax.Precision.HIGHEST)]
    if op == "random":
        return [_random(step, a[0])]
    if op == "indexing":
        return _indexing(step, a)
    if op == "fori":
        block = step.blocks[0]

        def fori_body(i: Any, carry: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(_run_block(block, [*carry, i], env))

        # Bounds as int32 arrays: the body's counter is the int32 the generator typed it as
        # (Python or NumPy ints make it int64 under jax_enable_x64, and a bitcast of it then
        # has another shape; rollout seed 206).
        return list(lax.fori_loop(jnp.int32(0), jnp.int32(p["trips"]), fori_body, tuple(a)))
    if op == "while":
        block = step.blocks[0]
        limit = jnp.clip(a[-1], 0, p.get("max_trips", 4))

        def while_cond(state: tuple[Any, ...]) -> Any:
            return state[0] < limit

        def while_body(state: tuple[Any, ...]) -> tuple[Any, ...]:
            return (state[0] + 1, *_run_block(block, list(state[1:]), env))

        return list(lax.while_loop(while_cond, while_body, (np.int32(0), *a[:-1]))[1:])
    if op == "scan":
        block = step.blocks[0]

        def scan_body(carry: tuple[Any, ...], x: Any) -> tuple[tuple[Any, ...], Any]:
            results = _run_block(block, [*carry, x], env)
            return tuple(results[:-1]), results[-1]

        final, ys = lax.scan(scan_body, tuple(a[:-1]), a[-1], reverse=p["reverse"],
                             unroll=p["unroll"])
        return [*final, ys]
    if op == "halving_while":
        # A trip count set by the data alone, with no counter bounding it (at most the bits
        # of the first carry, which the loop shifts right until it is zero).
        block = step.blocks[0]

        def halving_cond(state: tuple[Any, ...]) -> Any:
            return state[0] != np.zeros((), state[0].dtype)

        def halving_body(state: tuple[Any, ...]) -> tuple[Any, ...]:
            rest = _run_block(block, list(state), env)
            return (lax.shift_right_logical(state[0], np.ones((), state[0].dtype)), *rest)

        return list(lax.while_loop(halving_cond, halving_body, tuple(a))[1:])
    if op == "lane_map":
        return _lane_map(step, a, env)
    if op == "time_loop":
        return _time_loop(step, a, env)
    if op == "cond":
        blocks = step.blocks

        def branch(k: int) -> Callable[..., tuple[Any, ...]]:
            return lambda *ops: tuple(_run_block(blocks[k], list(ops), env))

        # lax.cond's first branch runs when the predicate is true.
        return list(lax.cond(_pred(a[0]), branch(0), branch(1), *a[1:]))
    raise ValueError(f"unknown fuzz op {op}")


def _lane_map(step: Step, args: list[Any], env: list[Any]) -> list[Any]:
    """The block written for one lane, `jax.vmap`ped over the arguments whose `in_axes` is 0
    (the others, and the block's captures, are the same for every lane)."""
    jax, _, _ = jax_modules()
    block = step.blocks[0]

    def one_lane(*ins: Any) -> tuple[Any, ...]:
        return tuple(_run_block(block, list(ins), env))

    return list(jax.vmap(one_lane, in_axes=tuple(step.params["in_axes"]))(*args))


def _time_loop(step: Step, carry: list[Any], env: list[Any]) -> list[Any]:
    """A rollout's time loop: the block maps (carry, step index) to (new carry, per-step
    logs); results are the final carry and the logs stacked over the steps. As `scan` (logs
    are its ys) or as `fori_loop` (logs written into carried buffers at the step index)."""
    _, jnp, lax = jax_modules()
    block = step.blocks[0]
    length, n_carry = step.params["length"], len(carry)

    def run(values: Sequence[Any], t: Any) -> tuple[list[Any], list[Any]]:
        results = _run_block(block, [*values, t], env)
        return results[:n_carry], results[n_carry:]

    if step.params["kind"] == "scan":
        def scan_body(values: tuple[Any, ...], t: Any) -> tuple[tuple[Any, ...], Any]:
            new, logs = run(values, t)
            return tuple(new), tuple(logs)

        final, logs = lax.scan(scan_body, tuple(carry), np.arange(length, dtype=np.int32))
        return [*final, *logs]
    buffers = [jnp.zeros(v.shape, np_dtype(v.dtype))
               for v in step.extra_outs[n_carry - 1:]]

    def fori_body(t: Any, state: tuple[Any, ...]) -> tuple[Any, ...]:
        new, logs = run(state[:n_carry], t)
        written = [lax.dynamic_update_index_in_dim(b, x, t, 0)
                   for b, x in zip(state[n_carry:], logs, strict=True)]
        return (*new, *written)

    return list(lax.fori_loop(jnp.int32(0), jnp.int32(length), fori_body, (*carry, *buffers)))


def run_steps(steps: Sequence[Step], env: list[Any]) -> None:
    for step in steps:
        results = apply_step(step, env)
        assert len(results) == 1 + len(step.extra_outs), step.op
        env.extend(results)


def as_function(program: Program, every_value: bool = False) -> Callable[..., tuple[Any, ...]]:
    """The program as a function of its inputs returning its outputs (or every top-level
    value, for shrinking)."""

    def fn(*inputs: Any) -> tuple[Any, ...]:
        env = list(inputs)
        run_steps(program.steps, env)
        if every_value:
            return tuple(env)
        return tuple(env[i] for i in program.outputs)

    return fn


def check_step(step: Step, env_values: Sequence[Value]) -> bool:
    """Whether JAX accepts the step with these operand types and gives the promised ones."""
    jax, _, _ = jax_modules()
    structs = [jax.ShapeDtypeStruct(v.shape, np_dtype(v.dtype)) for v in env_values]
    needed = sorted(set(step.args) | _captured(step))

    def fn(*args: Any) -> list[Any]:
        env: list[Any] = [None] * len(env_values)
        for i, x in zip(needed, args, strict=True):
            env[i] = x
        return apply_step(step, env)

    try:
        results = jax.eval_shape(fn, *[structs[i] for i in needed])
    except Exception:  # noqa: BLE001 - any refusal by JAX means: not this step
        return False
    promised = [step.out, *step.extra_outs]
    return len(results) == len(promised) and all(
        tuple(r.shape) == v.shape and np.dtype(r.dtype) == np_dtype(v.dtype)
        for r, v in zip(results, promised, strict=True))


def _captured(step: Step) -> set[int]:
    return {c for b in step.blocks for c in b.captures}


def oracle(program: Program) -> tuple[str, list[np.ndarray]]:
    """(HLO text as JAX exports it, JAX's outputs)."""
    jax, _, _ = jax_modules()
    fn = jax.jit(as_function(program), keep_unused=True)
    args = [np.asarray(x) for x in program.input_data]
    text = fn.lower(*args).as_text(dialect="hlo")
    outputs = [np.asarray(o) for o in fn(*args)]
    return text, outputs


def every_value(program: Program) -> list[np.ndarray]:
    jax, _, _ = jax_modules()
    fn = jax.jit(as_function(program, every_value=True), keep_unused=True)
    return [np.asarray(o) for o in fn(*[np.asarray(x) for x in program.input_data])]
