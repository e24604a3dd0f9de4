"""The fenced code blocks of the docs, and what the docs convention says to do with each.

A plain line scanner rather than a Markdown library or pytest-examples: the convention only
needs fences, their info string and the `<!-- not run: ... -->` comment right above them, and a
scanner this small is easier to trust than a parser's token stream is to audit for where an
HTML comment ends up. pytest-examples runs python in the test process and takes its settings
from the fence's info string, where this convention wants a fresh process per block, shell
blocks against a live server, and the reason a block is not run in prose a reader sees.
Fences follow CommonMark closely enough for these files: three or more backticks or tildes,
closed by the same character at least as many times. Any indent is taken (a fence inside a
nested list item sits deeper than CommonMark's three spaces of a top-level one), so no block
can hide from the runner by its indentation; the fence's indent is stripped from its lines.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

PYTHON = frozenset({"python"})
SHELL = frozenset({"sh", "bash", "console"})
ILLUSTRATION = frozenset({"", "text", "json", "http", "yaml", "toml", "dockerfile", "mermaid"})
"""Output, configuration and pictures: shown, never run. Anything outside these three sets is
a mistake (a typo such as `pyhton` must not turn a runnable block into a silent illustration)."""

DEMO_ADDRESSES = ("http://127.0.0.1:8000", "127.0.0.1:8000", "localhost:8000")
"""How the docs name the demo server; the runner points each at the server the tests started."""

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARKER_START = re.compile(r"^\s*<!--\s*not run\b")
_MARKER = re.compile(r"^\s*<!--\s*not run\b(?P<rest>.*?)(?:-->\s*)?$", re.DOTALL)


@dataclass(frozen=True)
class Marker:
    """A `<!-- not run: reason -->` line; `marks` is the line of the block it stands above."""

    path: str
    line: int
    reason: str
    marks: int | None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Block:
    path: str
    """Relative to the repository root, as the test ids show it."""
    line: int
    """1-based line of the opening fence."""
    lang: str
    source: str
    marker: Marker | None = None

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def kind(self) -> str:
        """`python`, `shell`, `illustration` or `unknown`."""
        if self.lang in PYTHON:
            return "python"
        if self.lang in SHELL:
            return "shell"
        if self.lang in ILLUSTRATION:
            return "illustration"
        return "unknown"

    @property
    def runs(self) -> bool:
        return self.marker is None and self.kind in ("python", "shell")


@dataclass(frozen=True)
class Document:
    blocks: tuple[Block, ...]
    markers: tuple[Marker, ...]


def _reason(rest: str) -> str:
    """`: because` -> `because`; `` or `:` -> `` (an empty reason, which a test refuses)."""
    rest = " ".join(rest.split())  # a wrapped reason reads as one line
    return rest[1:].strip() if rest.startswith(":") else rest


def _comment_end(lines: list[str], start: int) -> int:
    """The line on which the HTML comment opened at `start` closes (the last line if never)."""
    for k in range(start, len(lines)):
        if "-->" in lines[k]:
            return k
    return len(lines) - 1


def parse(path: str, text: str) -> Document:
    """Every fenced block of `text` and every `not run` marker, with which block each marks."""
    lines = text.splitlines()
    blocks: list[Block] = []
    markers: list[Marker] = []
    pending: Marker | None = None  # a marker with only blank lines after it so far
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence is None:
            if _MARKER_START.match(line):
                end = _comment_end(lines, i)  # a long reason may wrap over several lines
                marker = _MARKER.match(" ".join(lines[i : end + 1]))
                assert marker is not None
                if pending is not None:
                    markers.append(pending)  # a marker above a marker marks nothing
                pending = Marker(path, i + 1, _reason(marker["rest"]), None)
                i = end + 1
                continue
            if line.strip() and pending is not None:
                markers.append(pending)  # prose between a marker and a block: it marks nothing
                pending = None
            i += 1
            continue
        opening = fence["fence"]
        indent = len(fence["indent"])
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = lines[j].strip()
            if closing and set(closing) == {opening[0]} and len(closing) >= len(opening):
                break
            content = lines[j]
            body.append(content[min(indent, len(content) - len(content.lstrip(" "))) :])
            j += 1
        info = fence["info"].strip()
        lang = info.split()[0] if info else ""
        marker_above = None
        if pending is not None:
            marker_above = Marker(pending.path, pending.line, pending.reason, i + 1)
            markers.append(marker_above)
            pending = None
        source = "\n".join(body) + ("\n" if body else "")
        blocks.append(Block(path, i + 1, lang, source, marker_above))
        i = j + 1
    if pending is not None:
        markers.append(pending)
    return Document(tuple(blocks), tuple(markers))


LEFT_OUT_ENV = "AGENT_DOCS_LEFT_OUT"
"""Comma-separated pages (`docs/integrations.md`) whose blocks a run leaves out: set only by
`make test-lowest`, whose venv has no framework adapters (their extras pin versions of their
own, so the core's lowest bounds are tested without them)."""


def doc_files(root: Path) -> list[Path]:
    """The documents whose blocks are run: README.md, docs/*.md and bench/README.md, less the
    pages named in `AGENT_DOCS_LEFT_OUT`."""
    left_out = {p.strip() for p in os.environ.get(LEFT_OUT_ENV, "").split(",") if p.strip()}
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "bench/README.md"]
    return [p for p in pages if p.relative_to(root).as_posix() not in left_out]


def read_docs(root: Path) -> Document:
    """All the documents' blocks and markers, paths relative to `root`."""
    blocks: list[Block] = []
    markers: list[Marker] = []
    for path in doc_files(root):
        found = parse(path.relative_to(root).as_posix(), path.read_text(encoding="utf-8"))
        blocks.extend(found.blocks)
        markers.extend(found.markers)
    return Document(tuple(blocks), tuple(markers))


def shell_script(block: Block) -> str:
    """What bash runs: a `console` block's `$ ` commands, prompts stripped (a command ending in
    a backslash goes on to the next line, whose `> ` prompt is stripped too), every other shell
    block as written. The rest of a console block is the output shown."""
    if block.lang != "console":
        return block.source
    commands: list[str] = []
    continued = False
    for line in block.source.splitlines():
        if continued:
            commands.append(line[2:] if line.startswith("> ") else line)
        elif line.startswith("$ "):
            commands.append(line[2:])
        else:
            continue
        continued = line.endswith("\\")
    return "\n".join(commands) + "\n"


def pointed_at(source: str, host: str, port: int) -> str:
    """`source` with the docs' demo address replaced by the server the tests run."""
    source = source.replace(DEMO_ADDRESSES[0], f"http://{host}:{port}")
    for address in DEMO_ADDRESSES[1:]:
        source = source.replace(address, f"{host}:{port}")
    return source


def unknown_tags(blocks: tuple[Block, ...]) -> list[str]:
    return [f"{b.id} ```{b.lang}" for b in blocks if b.kind == "unknown"]


def markers_without_reason(markers: tuple[Marker, ...]) -> list[str]:
    return [m.where for m in markers if not m.reason]


def console_blocks_without_command(blocks: tuple[Block, ...]) -> list[str]:
    """A console block with no `$ ` line would run nothing and pass: it is output (`text`)."""
    return [b.id for b in blocks if b.lang == "console" and not shell_script(b).strip()]


def markers_marking_nothing(markers: tuple[Marker, ...]) -> list[str]:
    return [m.where for m in markers if m.marks is None]
