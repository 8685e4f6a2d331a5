"""The codegen IR: canonical index arithmetic (one spelling per position, C's division),
hash-consed value numbering, and the C printer's spelling of nodes and loops."""

from __future__ import annotations

import itertools

import pytest

from hlofuse.codegen import cir
from hlofuse.codegen.body import FunctionBody
from hlofuse.codegen.cir import Binary, Int, Var
from hlofuse.ir.dtypes import DType
from hlofuse.targets.c.language import C

i0, j1, j2, j3 = Var("i0"), Var("j1"), Var("j2"), Var("j3")


def text(expr: cir.Expr, forms: dict[str, cir.Affine] | None = None) -> str:
    return C.top(cir.as_expr(cir.canonical(expr, forms or {})))


def b(op: str, x: cir.Expr | int, y: cir.Expr | int) -> cir.Expr:
    return Binary(op, Int(x) if isinstance(x, int) else x, Int(y) if isinstance(y, int) else y)


def test_constants_fold() -> None:
    assert text(b("+", 0, 3)) == "3"
    assert text(b("-", b("+", b("*", 2, 16384), 5), 7)) == "32766"
    assert text(cir.Unary("-", b("-", 4, 9))) == "5"


def test_spellings_of_one_position_agree() -> None:
    assert text(b("+", b("*", j2, 16384), i0)) == text(b("+", i0, b("*", 16384, j2)))
    assert text(b("-", b("+", i0, 32768), 32768)) == "i0"
    # A piece of a concatenate read back at its offset is the position it started from.
    forms = {"j7": cir.canonical(b("+", i0, 32768), {})}
    assert text(b("-", Var("j7"), 32768), forms) == "i0"
    assert text(b("+", b("*", i0, 4), 1)) == "i0 * 4 + 1"


def test_names_with_forms_are_replaced_by_them() -> None:
    forms = {"j2": cir.canonical(b("+", 0, 1), {}),
             "j3": cir.canonical(b("+", b("*", i0, 4), 2), {})}
    assert text(b("+", b("*", j2, 2), j2)) == "j2 * 3"  # j2 unknown here: an atom
    assert text(b("+", b("*", j2, 2), j2), forms) == "3"
    assert text(b("-", j3, b("*", i0, 4)), forms) == "2"


def test_division_and_remainder_follow_c() -> None:
    for x, y in itertools.product(range(-9, 10), (-4, -3, 3, 4)):
        quotient = abs(x) // abs(y) * (1 if (x >= 0) == (y > 0) else -1)
        assert text(b("/", x, y)) == str(quotient)
        assert text(b("%", x, y)) == str(x - quotient * y)
    assert text(b("/", b("+", b("*", i0, 8), 16), 8)) == "i0 + 2"  # exact: every term divides
    assert text(b("%", b("+", b("*", i0, 8), 16), 8)) == "0"
    assert text(b("/", b("+", i0, 3), 4)) == "((i0 + 3) / 4)"  # not exact: an atom of its own
    assert text(b("+", b("%", i0, 4), 1)) == "(i0 % 4) + 1"


def test_products_of_variables_stay_atoms() -> None:
    assert text(b("+", b("*", i0, j1), 2)) == "(i0 * j1) + 2"


@pytest.mark.parametrize("expr", [b("/", i0, j1), b("/", i0, 0), cir.load("a", Int(3)),
                                  cir.Select(i0, Int(1), Int(2))])
def test_what_is_not_index_arithmetic_is_refused(expr: cir.Expr) -> None:
    with pytest.raises(cir.NotAffine):
        cir.canonical(expr, {})


def test_large_constants_keep_their_width() -> None:
    assert text(b("+", i0, b("*", 3, 1073741824))) == "i0 + 3221225472LL"


def test_value_numbering_never_reuses_loads_or_reassigned_variables() -> None:
    body = FunctionBody()
    y, z, two = Var("y"), Var("z"), C.literal(DType.F32, 2.0)
    assert body.let("float", Binary("*", y, two)) == body.let("float", Binary("*", y, two))
    assert body.let("float", Binary("*", y, two)) != body.let("double", Binary("*", y, two))
    load = cir.load("a0", i0)
    assert body.let("float", load) != body.let("float", load)
    total = body.declare("float", "total", C.literal(DType.F32, 0.0))
    before = body.let("float", Binary("+", total, y))
    body.assign(total, Var("v3"))
    assert body.let("float", Binary("+", total, y)) != before
    acc = body.declare("float", "acc")
    assert body.let("float", Binary("+", acc, y)) != body.let("float", Binary("+", acc, y))
    one = C.literal(DType.F32, 1.0)
    with body.if_(Var("c")):
        inner = body.let("float", Binary("-", z, one))
    assert body.let("float", Binary("-", z, one)) != inner  # declared in a closed block


def test_signed_zeros_and_nans_are_different_constants() -> None:
    assert C.literal(DType.F32, 0.0) != C.literal(DType.F32, -0.0)
    assert C.const_text(C.literal(DType.F32, -0.0)) == "-0x0.0p+0f"
    nan = C.const_text(C.literal(DType.F32, float("nan")))
    assert nan.startswith("hlofuse_f32_from_bits(")


def test_loops_and_pragmas_come_from_the_language() -> None:
    loop = cir.For("i", Int(0), Int(8), [cir.Assign(cir.load("r", Var("i")), Int(1))],
                   cir.Loop(simd=True))
    reduction = cir.For("k", Int(0), Int(4), [cir.Assign(Var("s"), Var("k"), "+=")],
                        cir.Loop(reduction=("+", "s")))
    lines = C.statements([loop, reduction], 0)
    assert lines == ["#pragma omp simd", "for (int64_t i = 0; i < 8; ++i) {", "  r[i] = 1;",
                     "}", "#pragma omp simd reduction(+:s)", "for (int64_t k = 0; k < 4; ++k) {",
                     "  s += k;", "}"]


def test_names_come_from_the_hlo_sanitised_and_unique() -> None:
    from hlofuse.codegen.naming import Names, identifier

    assert identifier("add.3") == "add_3" and identifier("fusion.12") == "fusion_12"
    # Anything that could spell C, its libraries or the header gets a suffix.
    for risky in ("int", "sin", "j1", "drand48", "int64_t", "INT64_MIN", "hlofuse_f32_bits"):
        assert identifier(risky) == f"{risky}_h"
    assert identifier('x"; system("rm -rf /"); //.1') == "x___system__rm__rf_________1"
    assert identifier("7up") == "h_7up"
    names = Names(("v0",))
    assert [names.unique("a.1"), names.unique("a-1"), names.fresh("v")] == ["a_1", "a_1_1", "v1"]
    assert names.unique("v1.5") == "v1_5" and names.unique("v1") == "v1_h"


def test_claimed_names_are_the_least_free_suffix_whatever_was_taken_before() -> None:
    """The per-stem counter gives the name a scan from `_1` gives, with claims of one stem,
    of stems that spell another's suffixed names (`x_1` against `x` claimed twice) and
    reservations interleaved."""
    import random

    from hlofuse.codegen.naming import Names

    def scanned(taken: set[str], stem: str) -> str:  # the definition: least free suffix
        candidate, k = stem, 1
        while candidate in taken:
            candidate, k = f"{stem}_{k}", k + 1
        taken.add(candidate)
        return candidate

    rng = random.Random(7)
    names, taken = Names(("x_2", "y")), {"x_2", "y"}
    stems = ["x", "x_1", "x_1_1", "y", "y_3", "z"]
    for _ in range(3000):
        if rng.random() < 0.1:
            extra = f"{rng.choice(stems)}_{rng.randrange(1, 40)}"
            names.reserve(extra)
            taken.add(extra)
            continue
        stem = rng.choice(stems)
        assert names._claim(stem) == scanned(taken, stem)
    assert names.taken == taken
