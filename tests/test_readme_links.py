"""Every relative link in README.md points to a file of the repository.

The README is not part of the documentation site, so `mkdocs build --strict` (make docs), which
checks the links of the pages under docs/, never reads it; this test does for the README.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"

# Inline links and images, `[text](target)` and `![alt](target)`, with an optional title.
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# Reference definitions, `[name]: target`, at the start of a line.
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?", re.MULTILINE)
FENCED_BLOCK = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# A URL scheme (https:, mailto:, ...): not a file of the repository.
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def relative_targets(markdown: str) -> list[str]:
    """The file paths that the links and images of `markdown` point to, in order.

    Code is not Markdown, so fenced blocks and code spans are dropped first; external URLs and
    links to an anchor of the same page are left out, and an anchor after a path is cut off.
    """
    prose = CODE_SPAN.sub("", FENCED_BLOCK.sub("", markdown))
    targets = INLINE_LINK.findall(prose) + REFERENCE_LINK.findall(prose)
    paths = [unquote(t.split("#", 1)[0]) for t in targets if not SCHEME.match(t)]
    return [p for p in paths if p]


def test_every_relative_link_in_the_readme_points_to_a_file() -> None:
    targets = relative_targets(README.read_text(encoding="utf-8"))
    assert any(t.startswith("docs/") for t in targets), "README.md no longer links to docs/"
    broken = [t for t in targets if not (ROOT / t).is_file()]
    outside = [t for t in targets if not (ROOT / t).resolve().is_relative_to(ROOT.resolve())]
    assert broken == [], f"README.md links to files that do not exist: {broken}"
    assert outside == [], f"README.md links outside the repository: {outside}"


def test_the_scan_reads_links_and_images_but_not_code_urls_or_anchors() -> None:
    text = (
        'See [the study](docs/study.md#results) and ![a plot](docs/plot%20a.png "title").\n'
        "`[in a code span](span.md)` and [a site](https://example.org/x.md), [here](#top).\n"
        "```python\nx = a[i](j.md)\n```\n"
        "[ref]: CHANGELOG.md\n"
    )
    assert relative_targets(text) == ["docs/study.md", "docs/plot a.png", "CHANGELOG.md"]
