"""The README stays a ten-minute read, and every page it points at exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MAX_LINES = 200
LINK = re.compile(r"\]\(((?:docs|bench)/[^)#\s]+)\)")
MENTION = re.compile(r"`((?:docs|bench)/[\w./-]+\.(?:md|png))`")


def test_the_readme_is_at_most_200_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move a subject to docs/"


def test_every_page_the_readme_links_or_names_exists() -> None:
    text = README.read_text(encoding="utf-8")
    named = set(LINK.findall(text)) | set(MENTION.findall(text))
    assert named, "the README names no docs page: the patterns above no longer match it"
    missing = sorted(path for path in named if not (REPO / path).is_file())
    assert not missing, f"README.md points at files that do not exist: {missing}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    linked = set(LINK.findall(text))
    pages = {path.relative_to(REPO).as_posix() for path in (REPO / "docs").glob("*.md")}
    unlinked = sorted(pages - linked)
    assert not unlinked, f"docs pages the README's list does not link: {unlinked}"
