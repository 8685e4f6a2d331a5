"""Signed zeros and denormals through maximum, minimum, sign, reduce and pow, bit for bit, in
the compiled code and the interpreter alike; and bitcast-convert between element widths.

The expected bits are what XLA's CPU code gives (JAX 0.10.2 on x86-64 Linux, constant folding
and the algebraic simplifier off, as tests/fuzz runs its oracle):
- maximum/minimum are llvm.maximum/minimum under DAZ: a denormal operand reads as a zero of its
  sign, -0 < +0, the result never a denormal; maximum(x, x) is folded to x (unflushed);
- sign is copysign(x != 0, x) under DAZ: a denormal gives a zero of its sign;
- pow is glibc's pow under DAZ: a denormal base reads as +-2^-150 (f32, bf16) or +-2^-1075
  (f64), the exponent is read exactly (pow(-0, -denormal) = inf), the result is flushed;
- f16 values are normal numbers in f32 registers: never flushed.
"""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

D32, D64 = 0x000116C2, 0x000012688B70E62B  # 1e-40 and 1e-310, both denormal
NEG32, NEG64 = 0x80000000, 0x8000000000000000
ONE32, ONE64 = 0x3F800000, 0x3FF0000000000000

# (a, b, maximum(a, b), minimum(a, b)) as f32 bits, measured.
EXTREMA_F32 = [
    (D32, 0, 0, 0),
    (NEG32 | D32, 0, 0, NEG32),
    (D32, NEG32, 0, NEG32),
    (NEG32 | D32, NEG32, NEG32, NEG32),
    (0, NEG32, 0, NEG32),
    (NEG32, 0, 0, NEG32),
    (0, 0, 0, 0),
    (NEG32, NEG32, NEG32, NEG32),
    (D32, 2 * D32, 0, 0),
    (2 * D32, D32, 0, 0),
    (NEG32 | D32, NEG32 | ONE32, NEG32, NEG32 | ONE32),
    (ONE32, D32, ONE32, 0),
    (NEG32 | D32, NEG32 | D32, NEG32, NEG32),
    (0x7FC00000, D32, 0x7FC00000, 0x7FC00000),
]
# sign(a) for the first operands above.
SIGN_F32 = [0, NEG32, 0, NEG32, 0, NEG32, 0, NEG32, 0, 0, NEG32, ONE32, NEG32, 0x7FC00000]


def _module(dtype: str, n: int, body: str, params: int = 2) -> str:
    args = "".join(f"  p{k} = {dtype}[{n}] parameter({k})\n" for k in range(params))
    return f"HloModule m\n\nENTRY main {{\n{args}{body}}}\n"


def _interpret(text: str, *args: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(v) for v in flatten_value(evaluate(parse_module(text), list(args)))]


def _compiled(text: str, strategy: str, *args: np.ndarray) -> list[np.ndarray]:
    from hlofuse.api import compile_module

    executable = compile_module(parse_module(text), strategy, "cpu")
    return [np.asarray(v) for v in executable.run_flat(list(args))]


def _bits(x: np.ndarray) -> list[int]:
    return [int(b) for b in x.view(np.dtype(f"u{x.dtype.itemsize}")).ravel()]


def _both(text: str, *args: np.ndarray, strategy: str = "none") -> list[list[list[int]]]:
    """The outputs' bits from the interpreter and the compiled code (asserted equal)."""
    interpreted = [_bits(o) for o in _interpret(text, *args)]
    compiled = [_bits(o) for o in _compiled(text, strategy, *args)]
    assert compiled == interpreted
    return [interpreted, compiled]


def _f32(bits: list[int]) -> np.ndarray:
    return np.array(bits, np.uint32).view(np.float32)


def _f64(bits: list[int]) -> np.ndarray:
    return np.array(bits, np.uint64).view(np.float64)


EXTREMA_BODY = """  mx = {t}[{n}] maximum(p0, p1)
  mn = {t}[{n}] minimum(p0, p1)
  sg = {t}[{n}] sign(p0)
  same = {t}[{n}] maximum(p0, p0)
  ROOT out = ({t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}]) tuple(mx, mn, sg, same)
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("strategy", ["none", "xla"])
def test_f32_max_min_sign_of_zeros_and_denormals(strategy: str) -> None:
    n = len(EXTREMA_F32)
    text = _module("f32", n, EXTREMA_BODY.format(t="f32", n=n))
    a = _f32([row[0] for row in EXTREMA_F32])
    b = _f32([row[1] for row in EXTREMA_F32])
    for mx, mn, sg, same in _both(text, a, b, strategy=strategy):
        assert mx == [row[2] for row in EXTREMA_F32]
        assert mn == [row[3] for row in EXTREMA_F32]
        assert sg == SIGN_F32
        assert same == _bits(a)  # maximum(x, x) is x itself, denormals included


def _widen(bits32: int) -> int:
    """The f64 row for an f32 row: the same sign and class (zero, denormal, one, NaN)."""
    sign = (bits32 & NEG32) << 32
    magnitude = bits32 & 0x7FFFFFFF
    table = {0: 0, D32: D64, 2 * D32: 2 * D64, ONE32: ONE64, 0x7FC00000: 0x7FF8000000000000}
    return sign | table[magnitude]


@pytest.mark.needs_cc
def test_f64_max_min_sign_of_zeros_and_denormals() -> None:
    n = len(EXTREMA_F32)
    text = _module("f64", n, EXTREMA_BODY.format(t="f64", n=n))
    a = _f64([_widen(row[0]) for row in EXTREMA_F32])
    b = _f64([_widen(row[1]) for row in EXTREMA_F32])
    for mx, mn, sg, same in _both(text, a, b):
        assert mx == [_widen(row[2]) for row in EXTREMA_F32]
        assert mn == [_widen(row[3]) for row in EXTREMA_F32]
        assert sg == [_widen(s) for s in SIGN_F32]
        assert same == _bits(a)


@pytest.mark.needs_cc
def test_f16_is_never_flushed_and_orders_zeros() -> None:
    # f16 denormals (0x0011) are normal in f32 registers; min(+0, -0) = -0 either way round
    # (tests/fuzz/corpus/wrong-none-seed417).
    a = np.array([0x0000, 0x8000, 0x0011, 0x8011, 0x0011], np.uint16).view(np.float16)
    b = np.array([0x8000, 0x0000, 0x3800, 0x3800, 0x0000], np.uint16).view(np.float16)
    text = _module("f16", 5, EXTREMA_BODY.format(t="f16", n=5))
    for mx, mn, sg, _ in _both(text, a, b):
        assert mx == [0x0000, 0x0000, 0x3800, 0x3800, 0x0011]
        assert mn == [0x8000, 0x8000, 0x0011, 0x8011, 0x0000]
        assert sg == [0x0000, 0x8000, 0x3C00, 0xBC00, 0x3C00]


@pytest.mark.needs_cc
def test_bf16_is_flushed_as_f32() -> None:
    a = np.array([0x000B, 0x800B, 0x000B, 0x0000], np.uint16)
    b = np.array([0x3F00, 0x3F00, 0x0000, 0x800B], np.uint16)
    text = _module("bf16", 4, EXTREMA_BODY.format(t="bf16", n=4))
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    for mx, mn, sg, same in _both(text, a.view(bf16), b.view(bf16)):
        assert mx == [0x3F00, 0x3F00, 0x0000, 0x0000]
        assert mn == [0x0000, 0x8000, 0x0000, 0x8000]
        assert sg == [0x0000, 0x8000, 0x0000, 0x0000]
        assert same == a.tolist()


REDUCE = """HloModule m

r {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT m = {t}[] {op}(a, b)
}}

ENTRY main {{
  x = {t}[4,3] parameter(0)
  i = {t}[] constant({init})
  ROOT y = {t}[4] reduce(x, i), dimensions={{1}}, to_apply=r
}}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_reduce_min_and_max_flush_and_order_zeros(dtype: str) -> None:
    # tests/fuzz/corpus/wrong-none-seed411: the compiled reduce-min returned a denormal.
    wide, d, neg = (_f64, D64, NEG64) if dtype == "f64" else (_f32, D32, NEG32)
    inf = 0x7FF0000000000000 if dtype == "f64" else 0x7F800000
    rows = [[d, 3 * d, inf], [neg | d, 0, neg], [neg, 0, 0], [d, neg, 0]]
    x = wide([b for row in rows for b in row]).reshape(4, 3)
    (lo,), _ = _both(REDUCE.format(t=dtype, op="minimum", init="inf"), x)
    (hi,), _ = _both(REDUCE.format(t=dtype, op="maximum", init="-inf"), x)
    assert lo == [0, neg, neg, neg]
    assert hi == [inf, 0, 0, 0]


POW = """  ROOT y = {t}[{n}] power(p0, p1)
"""


@pytest.mark.needs_cc
def test_f32_pow_reads_operands_as_xlas_cpu_pow() -> None:
    # tests/fuzz/corpus/wrong-none-seed235 and -seed453: pow(-d, -d) is NaN, pow(-0, -d) inf.
    x = [D32, NEG32 | D32, NEG32, 0, D32, 0x40000000, 0x3F000000, 0xC0000000, NEG32 | D32]
    y = [0x3F000000, NEG32 | D32, NEG32 | D32, NEG32 | D32, 0, 0xC30C0000, 0x430C0000,
         0xC3150000, 0x40400000]  # 0.5, -d, -d, -d, 0, -140, 140, -149, 3
    (got,), _ = _both(_module("f32", len(x), POW.format(t="f32", n=len(x))), _f32(x), _f32(y))
    # 2^-75 = (2^-150)^0.5; NaN; inf; inf; 1; 2^-140 flushed; 2^-140 flushed; -2^-149 flushed;
    # (-2^-150)^3 flushed to -0.
    assert got[0] == 0x1A000000
    assert got[1] & 0x7FC00000 == 0x7FC00000
    assert got[2:] == [0x7F800000, 0x7F800000, ONE32, 0, 0, NEG32, NEG32]


@pytest.mark.needs_cc
def test_f64_pow_reads_operands_as_xlas_cpu_pow() -> None:
    x = [D64, NEG64 | D64, NEG64, 0, D64, NEG64 | D64]
    half, three = 0x3FE0000000000000, 0x4008000000000000
    y = [half, NEG64 | D64, NEG64 | D64, NEG64 | D64, 0, three]
    (got,), _ = _both(_module("f64", len(x), POW.format(t="f64", n=len(x))), _f64(x), _f64(y))
    assert got[0] == 0x1E56A09E667F3BCD  # (2^-1075)^0.5 = 2^-537.5
    assert got[1] & 0x7FF8000000000000 == 0x7FF8000000000000
    assert got[2:] == [0x7FF0000000000000, 0x7FF0000000000000, ONE64, NEG64]


@pytest.mark.needs_cc
def test_bf16_pow_reads_a_denormal_base_as_f32_does() -> None:
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    x = np.array([0x000B, 0x8000, 0x000B], np.uint16).view(bf16)
    y = np.array([0x3F00, 0x800B, 0x0000], np.uint16).view(bf16)
    (got,), _ = _both(_module("bf16", 3, POW.format(t="bf16", n=3)), x, y)
    assert got == [0x1A00, 0x7F80, 0x3F80]


# --- bitcast-convert between widths -------------------------------------------------------

BITCAST = """HloModule m

ENTRY main {{
  x = {source}{dims} parameter(0)
  ROOT y = {target}{out} bitcast-convert(x)
}}
"""

FUSED_BITCAST = """HloModule m

ENTRY main {
  x = u32[3,4,2] parameter(0)
  t = u32[4,3,2] transpose(x), dimensions={1,0,2}
  w = u64[4,3] bitcast-convert(t)
  one = u64[] constant(1)
  ones = u64[4,3] broadcast(one), dimensions={}
  s = u64[4,3] add(w, ones)
  n = u16[4,3,4] bitcast-convert(s)
  z = u16[] constant(0)
  total = u16[4,3] reduce(n, z), dimensions={2}, to_apply=add16
  narrow = u8[4,3,8] bitcast-convert(w)
  ROOT out = (u16[4,3], u8[4,3,8], u64[4,3]) tuple(total, narrow, s)
}

add16 {
  a = u16[] parameter(0)
  b = u16[] parameter(1)
  ROOT c = u16[] add(a, b)
}
"""


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


BITCASTS = [
    ("u32", (2, 2), "u64"),
    ("u64", (2,), "u32"),
    ("f32", (3, 2), "f64"),
    ("f64", (5,), "f32"),
    ("u8", (2, 3, 4), "f32"),
    ("f16", (7, 2), "u32"),
    ("s64", (3,), "s8"),
    ("bf16", (4,), "u8"),
    ("u32", (2,), "u64"),  # to a scalar
    ("u64", (), "u16"),  # from a scalar
]


def _random(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    from hlofuse.ir.dtypes import DType

    np_dtype = DType(dtype).numpy
    raw = rng.integers(0, 256, max(1, int(np.prod(shape))) * np_dtype.itemsize, np.uint8)
    raw = raw[: int(np.prod(shape)) * np_dtype.itemsize]
    return raw.view(np_dtype).reshape(shape)


@pytest.mark.needs_cc
@pytest.mark.parametrize("source,shape,target", BITCASTS,
                         ids=[f"{s}{_dims(d)}-{t}" for s, d, t in BITCASTS])
def test_bitcast_convert_between_widths(source: str, shape: tuple[int, ...], target: str) -> None:
    from hlofuse.ir.dtypes import DType

    source_bits, target_bits = DType(source).bits, DType(target).bits
    if target_bits > source_bits:
        out = shape[:-1]
    else:
        out = (*shape, source_bits // target_bits)
    text = BITCAST.format(source=source, dims=_dims(shape), target=target, out=_dims(out))
    x = _random(source, shape, np.random.default_rng(len(text)))
    expected = np.ascontiguousarray(x).view(DType(target).numpy).reshape(out)
    interpreted = _interpret(text, x)[0]
    compiled = _compiled(text, "none", x)[0]
    if DType(target).is_float:  # NaN payloads come back as they are, so compare bits
        assert _bits(interpreted) == _bits(expected)
        assert _bits(compiled) == _bits(expected)
    else:
        assert interpreted.tolist() == expected.tolist()
        assert compiled.tolist() == expected.tolist()


@pytest.mark.needs_cc
@pytest.mark.parametrize("strategy", ["none", "xla", "priority", "max"])
def test_bitcast_convert_between_widths_inside_fusions(strategy: str) -> None:
    x = np.random.default_rng(3).integers(0, 2**32, (3, 4, 2), dtype=np.uint64)
    x = x.astype(np.uint32)
    interpreted = _interpret(FUSED_BITCAST, x)
    compiled = _compiled(FUSED_BITCAST, strategy, x)
    wide = np.ascontiguousarray(x.transpose(1, 0, 2)).view(np.uint64).reshape(4, 3)
    assert interpreted[2].tolist() == (wide + np.uint64(1)).tolist()
    assert interpreted[1].tolist() == wide.reshape(4, 3, 1).view(np.uint8).tolist()
    for got, want in zip(compiled, interpreted, strict=True):
        assert got.tolist() == want.tolist()


@pytest.mark.needs_cc
def test_fuzz_corpus_bitcast_case_compiles() -> None:
    # tests/fuzz/corpus/issue15-bitcast-convert-u32x2-to-u64 was refused as invalid, then as
    # having no C code.
    text = BITCAST.format(source="u32", dims="[2,2]", target="u64", out="[2]")
    x = np.array([[1, 2], [0xFFFFFFFF, 0x80000000]], np.uint32)
    got = _compiled(text, "xla", x)[0]
    assert got.tolist() == [(2 << 32) | 1, (0x80000000 << 32) | 0xFFFFFFFF]


REMAINDER = """  ROOT y = {t}[{n}] remainder(p0, p1)
"""


@pytest.mark.needs_cc
def test_remainder_is_exact_but_for_a_denormal_divisor() -> None:
    # XLA's remainder is the C library's fmod: integer work on the dividend and the result, so
    # a denormal dividend or result stays; the divisor is compared with zero (under DAZ).
    x = [0x00C00000, D32, NEG32 | D32, 0x40A00000, NEG32, 0x7F800000, 0x40F00000, 0x00E00000]
    y = [0x00800000, ONE32, 0x40400000, D32, 0x40000000, 0x40000000, 0x7F800000, 0x00800000]
    (got,), _ = _both(_module("f32", len(x), REMAINDER.format(t="f32", n=len(x))),
                      _f32(x), _f32(y))
    # 1.5 * 2^-126 mod 2^-126 = 2^-127 (a denormal); d mod 1 = d; -d mod 3 = -d; 5 mod d: NaN;
    # -0 mod 2 = -0; inf mod 2: NaN; 7.5 mod inf = 7.5; 1.75 * 2^-126 mod 2^-126 = 0.75 * 2^-126.
    assert [got[k] for k in (0, 1, 2, 4, 6, 7)] == [0x00400000, D32, NEG32 | D32, NEG32,
                                                    0x40F00000, 0x00600000]
    assert got[3] & 0x7FC00000 == 0x7FC00000 and got[5] & 0x7FC00000 == 0x7FC00000

    x64 = _f64([0x0018000000000000, D64, NEG64 | D64, 0x4014000000000000, NEG64])
    y64 = _f64([0x0010000000000000, ONE64, 0x4008000000000000, D64, 0x4000000000000000])
    (got64,), _ = _both(_module("f64", 5, REMAINDER.format(t="f64", n=5)), x64, y64)
    assert [got64[k] for k in (0, 1, 2, 4)] == [0x0008000000000000, D64, NEG64 | D64, NEG64]
    assert got64[3] & 0x7FF8000000000000 == 0x7FF8000000000000


LOOP_BITCAST = """HloModule m

cond {
  cs = (s32[], u32[8,2]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  n = s32[] constant(5)
  ROOT c = pred[] compare(ci, n), direction=LT
}

body {
  s = (s32[], u32[8,2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = u32[8,2] get-tuple-element(s), index=1
  w = u64[8] bitcast-convert(x)
  k = u64[] constant(11400714819323198485)
  kb = u64[8] broadcast(k), dimensions={}
  m = u64[8] multiply(w, kb)
  sh = u64[] constant(29)
  shb = u64[8] broadcast(sh), dimensions={}
  r = u64[8] shift-right-logical(m, shb)
  y = u64[8] xor(m, r)
  back = u32[8,2] bitcast-convert(y)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], u32[8,2]) tuple(j, back)
}

ENTRY main {
  x0 = u32[8,2] parameter(0)
  z = s32[] constant(0)
  s0 = (s32[], u32[8,2]) tuple(z, x0)
  w0 = (s32[], u32[8,2]) while(s0), condition=cond, body=body
  ROOT r0 = u32[8,2] get-tuple-element(w0), index=1
}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("strategy", ["none", "xla+relax_concatenate"])
def test_bitcast_convert_between_widths_in_a_loop(strategy: str) -> None:
    # A hash step as rng-bit-generator lowerings write it: u32 pairs joined into u64 and split.
    x = np.arange(16, dtype=np.uint32).reshape(8, 2) * np.uint32(2654435761)
    want = x
    for _ in range(5):
        w = want.view(np.uint64).reshape(8) * np.uint64(11400714819323198485)
        want = (w ^ (w >> np.uint64(29))).reshape(8, 1).view(np.uint32)
    assert _interpret(LOOP_BITCAST, x)[0].tolist() == want.tolist()
    assert _compiled(LOOP_BITCAST, strategy, x)[0].tolist() == want.tolist()


REDUCE_PRECISION_F16 = """HloModule m

ENTRY main {{
  x = f16[65536] parameter(0)
  ROOT y = f16[65536] reduce-precision(x), exponent_bits={e}, mantissa_bits={m}
}}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("e,m", [(5, 7), (5, 10), (4, 3), (2, 1), (5, 0), (8, 23)])
def test_f16_reduce_precision_over_every_value(e: int, m: int) -> None:
    # The fuzzer's seed 812 (tests/fuzz/corpus/refused-none-seed812) was refused: no C code.
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    text = REDUCE_PRECISION_F16.format(e=e, m=m)
    assert _bits(_compiled(text, "none", x)[0]) == _bits(_interpret(text, x)[0])
