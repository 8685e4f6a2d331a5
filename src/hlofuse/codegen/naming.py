"""Names in generated code: from HLO names, sanitised, unique per function.

An HLO name becomes an identifier of [A-Za-z0-9_] (`fusion.5` is `fusion_5`), so the C reads
next to the HLO; nothing of the input text reaches the C otherwise. A stem that does not end
in `_<number>` could name something of C or of the generated header (a keyword, `sin`, `j1`,
`int64_t`, `hlofuse_...`) and gets the suffix `_h`; a taken name gets `_1`, `_2`, ...

Claiming is O(1) amortised: each stem remembers the next suffix to try, and a name once taken
is never given back, so the suffixes below it need no second look (a stem scanned from `_1` on
every claim made code generation quadratic in the claims of one name).
"""

from __future__ import annotations

import functools
import itertools
import re

_COMMENT_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_IDENTIFIER_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
# XLA's names (`add.3`, `fusion.12`) end in a number: as `add_3` they spell nothing of C, of its
# libraries (libm's j1 and log10, stdlib's drand48, ...) or of the generated header.
_NUMBERED = re.compile(r"[A-Za-z0-9_]*[a-z][A-Za-z0-9_]*_[0-9]+")
MAX_NAME = 48


def sanitize(name: str) -> str:
    """An HLO name as it may appear in a C comment: [A-Za-z0-9_.-] only."""
    return _COMMENT_UNSAFE.sub("_", name)[:80] or "_"


# Room for every name of a large module (CartPole unrolled 40 times has 88,500 instructions
# after fusion): a smaller cache is swept through and misses on every name.
@functools.lru_cache(maxsize=1 << 18)
def identifier(name: str) -> str:
    """An HLO name as a C identifier stem that names nothing else in the generated file."""
    stem = name.replace(".", "_")  # XLA's names: letters, digits, dots, underscores
    if not (stem.isascii() and stem.replace("_", "a").isalnum()):
        stem = _IDENTIFIER_UNSAFE.sub("_", stem)
    stem = stem[:MAX_NAME] or "_"
    if stem[0].isdigit():
        stem = "_" + stem
    if stem.startswith("_"):
        return f"h{stem}"
    safe = _NUMBERED.fullmatch(stem) is not None and not stem.lower().startswith("hlofuse")
    return stem if safe else f"{stem}_h"


class Names:
    """The identifiers of one function: HLO-derived ones and numbered temporaries."""

    def __init__(self, reserved: tuple[str, ...] = ()) -> None:
        self.taken = set(reserved)
        self._numbers = itertools.count()
        # stem -> the next suffix to try: every `stem_k` below it is taken (and stays taken).
        self._next_suffix: dict[str, int] = {}

    def unique(self, hlo_name: str) -> str:
        """An identifier from an HLO name."""
        return self._claim(identifier(hlo_name))

    def fresh(self, prefix: str) -> str:
        """A numbered temporary (`v12`)."""
        while True:
            candidate = f"{prefix}{next(self._numbers)}"
            if candidate not in self.taken:
                self.taken.add(candidate)
                return candidate

    def reserve(self, *names: str) -> None:
        self.taken.update(names)

    def _claim(self, stem: str) -> str:
        """The stem itself if free, else `stem_k` for the least free k: the same name a scan
        from k = 1 finds, since nothing taken is ever released. A suffix is skipped only where
        another claim or reservation took that exact name, so each name is looked at at most
        once per stem that spells it."""
        k = self._next_suffix.get(stem)
        if k is None:
            if stem not in self.taken:
                self.taken.add(stem)
                self._next_suffix[stem] = 1
                return stem
            k = 1
        candidate = f"{stem}_{k}"
        while candidate in self.taken:
            k += 1
            candidate = f"{stem}_{k}"
        self.taken.add(candidate)
        self._next_suffix[stem] = k + 1
        return candidate
