"""Index arithmetic in canonical form, so one element position gets one spelling.

Index maps build C index expressions by text (`j5 - 32768`, `0 + 3`, `j2 * 16384 + i0`). The
elemental emitter caches element values per (instruction, index text), so two spellings of one
position (a concatenate's second piece reached at `i0 + 32768 - 32768`, a slice of a slice)
would compute the value twice; in CartPole that is a whole Threefry hash per spelling. Here an
expression is parsed into an affine form over atoms (loop variables, clamped starts, and
divisions or remainders that do not simplify), constants are folded, and the form is printed in
one order. Division and remainder follow C (truncation toward zero).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(r"\s*(?:(?P<number>[0-9]+)(?:LL|ll|L|l)?|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                    r"|(?P<op>[-+*/%()]))")


class NotAffine(ValueError):
    """The text is not index arithmetic this module understands (left as it is)."""


@dataclass
class Affine:
    """const + sum(coefficient * atom); an atom is a name or a parenthesised expression."""

    const: int = 0
    terms: dict[str, int] = field(default_factory=dict)

    @property
    def is_constant(self) -> bool:
        return not self.terms

    def scaled(self, factor: int) -> Affine:
        if factor == 0:
            return Affine()
        return Affine(self.const * factor, {a: c * factor for a, c in self.terms.items()})

    def plus(self, other: Affine, sign: int = 1) -> Affine:
        terms = dict(self.terms)
        for atom, coefficient in other.terms.items():
            total = terms.get(atom, 0) + sign * coefficient
            if total:
                terms[atom] = total
            else:
                terms.pop(atom, None)
        return Affine(self.const + sign * other.const, terms)

    def text(self) -> str:
        """The canonical spelling: atoms in sorted order, the constant last."""
        parts: list[str] = []
        for atom in sorted(self.terms):
            coefficient = self.terms[atom]
            magnitude = abs(coefficient)
            term = atom if magnitude == 1 else f"{atom} * {literal(magnitude)}"
            if not parts:
                parts.append(term if coefficient > 0 else f"-{term}")
            else:
                parts.append(f"{'+' if coefficient > 0 else '-'} {term}")
        if self.const or not parts:
            if not parts:
                parts.append(literal(self.const))
            else:
                parts.append(f"{'+' if self.const > 0 else '-'} {literal(abs(self.const))}")
        return " ".join(parts)


def literal(number: int) -> str:
    return str(number) if -(1 << 31) < number < (1 << 31) else f"{number}LL"


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _operand(form: Affine) -> str:
    """`form` as the left operand of * / %: bare when it is one atom, else parenthesised."""
    if form.const == 0 and len(form.terms) == 1 and next(iter(form.terms.values())) == 1:
        return next(iter(form.terms))
    return f"({form.text()})"


class _Parser:
    def __init__(self, text: str, forms: dict[str, Affine]) -> None:
        self.tokens: list[tuple[str, str]] = []
        position = 0
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                if text[position:].strip():
                    raise NotAffine(text)
                break
            kind = match.lastgroup
            assert kind is not None
            self.tokens.append((kind, match.group(kind)))
            position = match.end()
        self.position = 0
        self.forms = forms

    def peek(self) -> str | None:
        return self.tokens[self.position][1] if self.position < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.position >= len(self.tokens):
            raise NotAffine("unexpected end")
        token = self.tokens[self.position]
        self.position += 1
        return token

    def parse(self) -> Affine:
        form = self.sum()
        if self.position != len(self.tokens):
            raise NotAffine("trailing tokens")
        return form

    def sum(self) -> Affine:
        form = self.product()
        while self.peek() in ("+", "-"):
            sign = 1 if self.take()[1] == "+" else -1
            form = form.plus(self.product(), sign)
        return form

    def product(self) -> Affine:
        form = self.unary()
        while self.peek() in ("*", "/", "%"):
            op = self.take()[1]
            right = self.unary()
            form = _combine(form, op, right)
        return form

    def unary(self) -> Affine:
        if self.peek() == "-":
            self.take()
            return self.unary().scaled(-1)
        kind, value = self.take()
        if kind == "number":
            return Affine(int(value))
        if kind == "name":
            known = self.forms.get(value)
            return Affine(known.const, dict(known.terms)) if known else Affine(0, {value: 1})
        if value != "(":
            raise NotAffine(value)
        form = self.sum()
        if self.take()[1] != ")":
            raise NotAffine("unbalanced parentheses")
        return form


def _combine(left: Affine, op: str, right: Affine) -> Affine:
    if op == "*":
        if right.is_constant:
            return left.scaled(right.const)
        if left.is_constant:
            return right.scaled(left.const)
        return Affine(0, {f"({_operand(left)} * {_operand(right)})": 1})
    if not right.is_constant or right.const == 0:
        raise NotAffine("division by a variable or by zero")
    divisor = right.const
    if left.is_constant:
        quotient = _c_div(left.const, divisor)
        return Affine(quotient if op == "/" else left.const - quotient * divisor)
    exact = all(c % divisor == 0 for c in [left.const, *left.terms.values()])
    if op == "/":
        if exact:  # (d * a) / d == a whatever the signs
            return Affine(left.const // divisor, {a: c // divisor for a, c in left.terms.items()})
        return Affine(0, {f"({_operand(left)} / {literal(divisor)})": 1})
    if exact:
        return Affine()
    return Affine(0, {f"({_operand(left)} % {literal(divisor)})": 1})


def canonical(text: str, forms: dict[str, Affine]) -> Affine:
    """The affine form of index expression `text`, names in `forms` replaced by their forms.

    Raises NotAffine for text that is not + - * / % over integers and names."""
    return _Parser(text, forms).parse()
