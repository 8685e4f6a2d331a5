"""Index arithmetic in canonical form: one spelling per position, C's division semantics."""

from __future__ import annotations

import itertools

import pytest

from hlofuse.codegen.index_expr import Affine, NotAffine, canonical


def text(expr: str, forms: dict[str, Affine] | None = None) -> str:
    return canonical(expr, forms or {}).text()


def test_constants_fold() -> None:
    assert text("0 + 3") == "3"
    assert text("2 * 16384 + 5 - 7") == "32766"
    assert text("-(4 - 9)") == "5"


def test_spellings_of_one_position_agree() -> None:
    assert text("j2 * 16384 + i0") == text("i0 + 16384 * j2")
    assert text("i0 + 32768 - 32768") == "i0"
    # A piece of a concatenate read back at its offset is the position it started from.
    forms = {"j7": canonical("i0 + 32768", {})}
    assert text("j7 - 32768", forms) == "i0"
    assert text("i0 * 4 + 1") == "i0 * 4 + 1"


def test_names_with_forms_are_replaced_by_them() -> None:
    forms = {"j2": canonical("0 + 1", {}), "j3": canonical("i0 * 4 + 2", {})}
    assert text("j2 * 2 + j2") == "j2 * 3"  # j2 unknown here: an atom
    assert text("j2 * 2 + j2", forms) == "3"
    assert text("j3 - i0 * 4", forms) == "2"


def test_division_and_remainder_follow_c() -> None:
    for a, b in itertools.product(range(-9, 10), (-4, -3, 3, 4)):
        quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)
        assert text(f"{a} / {b}") == str(quotient)
        assert text(f"{a} % {b}") == str(a - quotient * b)
    assert text("(i0 * 8 + 16) / 8") == "i0 + 2"  # exact: every term divisible
    assert text("(i0 * 8 + 16) % 8") == "0"
    assert text("(i0 + 3) / 4") == "((i0 + 3) / 4)"  # not exact: an atom of its own
    assert text("i0 % 4 + 1") == "(i0 % 4) + 1"


def test_products_of_variables_stay_atoms() -> None:
    assert text("i0 * j1 + 2") == "(i0 * j1) + 2"


@pytest.mark.parametrize("expr", ["i0 / j1", "i0 / 0", "a[3]", "x ? 1 : 2", "(i0 + 1", ""])
def test_what_is_not_index_arithmetic_is_refused(expr: str) -> None:
    with pytest.raises(NotAffine):
        canonical(expr, {})


def test_large_constants_keep_their_width() -> None:
    assert text("i0 + 3 * 1073741824") == "i0 + 3221225472LL"
