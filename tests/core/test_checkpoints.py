"""The journal's vocabulary: each payload parser gives back the golden journals' bytes, and no
library module but `core/checkpoints.py` spells a step name or a patch marker."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bounded_agents.core import checkpoints as cp
from bounded_agents.core.checkpoints import encode_payload
from bounded_agents.errors import JournalMismatch

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bounded_agents"
GOLDEN = ROOT / "tests" / "loop" / "golden"

PARSERS: tuple[tuple[Callable[[str], bool], Callable[[object], Any]], ...] = (
    (lambda n: n in (cp.PERSIST_USER, cp.PERSIST_ASSISTANT), cp.parse_seq),
    (lambda n: n == cp.LOAD_THREAD, cp.parse_load_thread),
    (cp.is_summarize_step, cp.parse_summarize),
    (lambda n: n.startswith(cp.PERSIST_USAGE_HISTORY), cp.parse_usage_recorded),
    (lambda n: n.startswith(cp.PERSIST_SUMMARY), cp.parse_summary_saved),
    (cp.is_model_step, cp.parse_model),
    (cp.is_tool_step, cp.parse_tool),
)


def _golden_steps() -> list[tuple[str, str, str]]:
    """(journal, step name, payload) of every step of every golden journal."""
    out = []
    for path in sorted(GOLDEN.glob("*.json")):
        for step in json.loads(path.read_text())["steps"]:
            out.append((path.stem, step["name"], step["payload"]))
    return out


def _parser(name: str) -> Callable[[object], Any]:
    found = [parse for matches, parse in PARSERS if matches(name)]
    assert len(found) == 1, name
    return found[0]


GOLDEN_STEPS = [s for s in _golden_steps() if not s[1].startswith(cp.PATCH_PREFIX)]


@pytest.mark.parametrize(("journal", "name", "payload"), GOLDEN_STEPS)
def test_parsing_a_golden_payload_and_dumping_it_gives_back_its_journaled_bytes(
    journal: str, name: str, payload: str
) -> None:
    parsed = _parser(name)(json.loads(payload))
    assert encode_payload(cp.dump(parsed)) == payload


def test_the_golden_journals_hold_every_current_payload_kind() -> None:
    """The round trip above covers each parser of the current path at least once."""
    used = {_parser(name) for _, name, _ in GOLDEN_STEPS}
    assert used == {parse for _, parse in PARSERS}


def test_the_golden_patch_steps_are_the_rolling_summary_marker() -> None:
    patches = [(n, p) for _, n, p in _golden_steps() if n.startswith(cp.PATCH_PREFIX)]
    assert patches and set(patches) == {(cp.patch_step(cp.ROLLING_SUMMARY), "true")}


@pytest.mark.parametrize(
    ("parse", "payload"),
    [
        (cp.parse_legacy_load, '{"messages":[{"role":"user","content":"q"}]}'),
        (
            cp.parse_load_thread,  # as written before `keep_refs` (a gap among the kept seqs)
            '{"keep":[{"role":"user","content":"q"}],"title":"t","has_assistant_message":true,'
            '"keep_seqs":[4]}',
        ),
        (
            cp.parse_load_thread,  # a message the policy made rides whole among the seqs
            '{"keep_refs":[{"role":"system","content":"made","seq":3},4],"title":null,'
            '"has_assistant_message":false}',
        ),
        (cp.parse_legacy_load, '{"keep":[{"role":"user","content":"q"}],"drop":[]}'),
        (
            cp.parse_legacy_summarize,
            '{"text":"- s","usage":{"prompt_tokens":1,"completion_tokens":2},"reserved":9}',
        ),
        (
            cp.parse_summarize,
            '{"calls":1,"budget":2,"rejected":"empty","last_seq":4,"input_messages":2,'
            '"input_tokens":30}',
        ),
        (
            cp.parse_summarize,
            '{"calls":2,"budget":2,"text":"- s","covers_through_seq":4,"input_messages":2,'
            '"input_tokens":30,"compressed":1,"fitted_tokens":30,"messages_cut":1,'
            '"clipped_chars":7}',
        ),
        (
            cp.parse_model,
            '{"response":{"content":"old","tool_calls":[],"usage":{"prompt_tokens":1,'
            '"completion_tokens":2}},"metrics":{}}',
        ),
        (cp.parse_model, '{"response":{"content":"older, with defaults left out"},"metrics":{}}'),
        (cp.parse_seq, '{"seq":null}'),
    ],
)
def test_the_payload_kinds_the_goldens_lack_round_trip_too(
    parse: Callable[[object], Any], payload: str
) -> None:
    assert encode_payload(cp.dump(parse(json.loads(payload)))) == payload


def test_a_parsed_payload_lists_its_keys_in_the_writers_order_and_keeps_unknown_ones() -> None:
    parsed = cp.parse_seq({"newer": 1, "seq": 3})
    assert list(parsed) == ["seq", "newer"]


@pytest.mark.parametrize(
    ("parse", "value"),
    [
        (cp.parse_seq, [1]),
        (cp.parse_seq, {}),
        (cp.parse_tool, {"call_id": "c", "content": 3, "is_error": False}),
        (cp.parse_load_thread, {"keep": [1]}),
        (cp.parse_load_thread, {"keep_refs": ["3"]}),
        (cp.parse_load_thread, {"keep_refs": [True]}),
        (cp.parse_load_thread, {"keep_refs": [3], "keep": []}),
        (cp.parse_load_thread, {"title": "neither keep nor keep_refs"}),
        (cp.parse_summarize, {"calls": True, "budget": 2, "input_messages": 1, "input_tokens": 1}),
        (cp.parse_model, {"response": {"content": "", "tool_calls": [{"id": 1}]}, "metrics": {}}),
    ],
)
def test_a_payload_of_another_shape_is_a_journal_mismatch(
    parse: Callable[[object], Any], value: object
) -> None:
    with pytest.raises(JournalMismatch):
        parse(value)
    assert cp.or_none(parse, value) is None


def test_the_builders_write_the_goldens_key_order() -> None:
    built = cp.load_thread_payload(
        [3, {"role": "user", "content": "q"}],
        last_prompt=None,
        summary=None,
        fold={"through": 2, "messages": []},
        title="t",
        has_assistant_message=True,
    )
    assert list(built) == ["keep_refs", "fold", "title", "has_assistant_message"]
    assert list(cp.model_payload({}, {}, None)) == ["response", "metrics", "prompt_digest"]


def test_fold_steps_are_named_bare_first_then_by_their_number() -> None:
    assert cp.fold_step(cp.SUMMARIZE, 1) == "history:summarize"
    assert cp.fold_step(cp.PERSIST_SUMMARY, 3) == "persist:summary:3"
    assert cp.tool_call_id(cp.tool_step(2, "call:x")) == "call:x"


STEP_NAME = re.compile(
    r"^(persist:(user|assistant|summary|usage)|load:thread|history:|model:|tool:|patch:"
    r"|agent:(rolling-summary|selected-history))"
)
"""What a journal step name or patch marker starts with, as a string literal would spell it."""

SPELLERS = {PACKAGE / "core" / "checkpoints.py"}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
        if isinstance(node, ast.Module | ast.ClassDef):  # attribute docstrings
            for before, after in zip(node.body, node.body[1:], strict=False):
                if isinstance(before, ast.Assign | ast.AnnAssign) and isinstance(after, ast.Expr):
                    out.add(id(after.value))
    return out


def _step_name_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and STEP_NAME.match(node.value)
    ]


def test_no_library_module_but_checkpoints_spells_a_step_name_or_patch_marker() -> None:
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in SPELLERS
        for hit in _step_name_literals(path)
    ]
    assert found == []


def test_the_scan_finds_the_literals_checkpoints_spells() -> None:
    """The scan above can fail: it sees the names where they are spelled."""
    hits = " ".join(_step_name_literals(PACKAGE / "core" / "checkpoints.py"))
    for name in ("'load:thread'", "'persist:user'", "'model:'", "'agent:rolling-summary'"):
        assert name in hits
