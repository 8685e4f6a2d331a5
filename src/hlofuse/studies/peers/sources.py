"""The source text of a hand-written peer kernel, with the headers it includes from beside it
pasted in place: the toolchain compiles text (its cache key is a hash of it), so a header
edited later must change the text too."""

from __future__ import annotations

import re
from pathlib import Path

_LOCAL_INCLUDE = re.compile(r'^#include "([A-Za-z0-9_.]+)"$', re.MULTILINE)


def kernel_source(path: Path) -> str:
    """`path`'s text with each `#include "NAME"` of a file next to it replaced by that file."""
    def paste(match: re.Match[str]) -> str:
        header = path.with_name(match.group(1))
        return header.read_text(encoding="utf-8") if header.is_file() else match.group(0)

    return _LOCAL_INCLUDE.sub(paste, path.read_text(encoding="utf-8"))
