"""The `unrelated` refusal's threshold, measured, and the backoff's arithmetic.

The corpus (tests/core/fold_corpus.py) holds good summaries of every style the project has or
a user may bring, and the junk the issue found stored; the judge must accept every good one and
refuse every junk one, with the margins docs/history.md reports."""

from __future__ import annotations

from collections import defaultdict

import pytest

from bounded_agents.core.fold_health import (
    BACKOFF_MAX_TURNS,
    MIN_SOURCE_TERMS,
    TURN_MESSAGES,
    UNRELATED_BELOW,
    backoff_after,
    backoff_turns,
    judge_relatedness,
    may_fold,
    new_part,
    same_health,
    text_terms,
    turns_left,
)
from bounded_agents.core.ports import FoldHealth
from tests.core.fold_corpus import JUNK_SENTENCE, THREADS, Case, corpus


@pytest.fixture(scope="module")
def cases() -> tuple[list[Case], list[Case]]:
    return corpus()


def _supports(cases: list[Case]) -> dict[str, list[float]]:
    by: dict[str, list[float]] = defaultdict(list)
    for c in cases:
        verdict = judge_relatedness(c.summary, c.chunk, c.previous)
        by[c.label].append(verdict.support if verdict.judged else 1.0)
    return by


def test_every_good_summary_of_the_corpus_is_accepted(
    cases: tuple[list[Case], list[Case]],
) -> None:
    good, _ = cases
    refused = [c for c in good if not judge_relatedness(c.summary, c.chunk, c.previous).related]
    assert refused == []
    assert len(good) == 129
    by = _supports(good)
    # Every style is there, and judged often enough to count.
    assert set(by) >= {
        "reference (compact)",
        "verbose (extractive)",
        "verbose (extractive) (compress)",
        "hand-written: terse",
        "hand-written: notes",
        "hand-written: loose paraphrase",
        "hand-written: notes, appended",
    }
    judged = [c for c in good if judge_relatedness(c.summary, c.chunk, c.previous).judged]
    assert len(judged) >= 100
    # The margins docs/history.md quotes: the loosest paraphrase clears the threshold.
    assert min(min(v) for v in by.values()) >= 0.27 > UNRELATED_BELOW


def test_every_junk_summary_of_the_corpus_is_refused(cases: tuple[list[Case], list[Case]]) -> None:
    _, junk = cases
    verdicts = [judge_relatedness(c.summary, c.chunk, c.previous) for c in junk]
    assert len(junk) == 240
    assert [c.label for c, v in zip(junk, verdicts, strict=True) if v.related] == []
    assert all(v.judged for v in verdicts)
    assert max(v.support for v in verdicts) <= 0.20 < UNRELATED_BELOW


def test_an_appended_junk_line_is_judged_alone_not_vouched_for_by_the_notes() -> None:
    notes = str(THREADS[0]["notes"])
    chunk = tuple(str(t) for t in THREADS[1]["chunk"])  # type: ignore[attr-defined]
    assert new_part(f"{notes}\n{JUNK_SENTENCE}", notes) == JUNK_SENTENCE
    assert not judge_relatedness(f"{notes}\n{JUNK_SENTENCE}", chunk, notes).related
    assert judge_relatedness(notes, chunk, notes).related  # nothing new: not judged


def test_too_little_to_judge_by_is_accepted() -> None:
    # The golden journals' toy summarizer over "q0 q0 ..." chunks: no evidence, no refusal.
    chunk = [f"q{i} " * 5 for i in range(5)] + [f"a{i} " * 5 for i in range(4)]
    verdict = judge_relatedness("- the user asked 9 things through 9", chunk, None)
    assert verdict.related and not verdict.judged
    assert verdict.source_terms < MIN_SOURCE_TERMS
    short = judge_relatedness("- nothing noted yet", [str(t) for t in THREADS[2]["chunk"]])  # type: ignore[attr-defined]
    assert short.related and not short.judged


def test_identifiers_match_by_their_parts_and_words_by_their_stem() -> None:
    chunk = ["Please note: my order number is ORD-44121, delivered to Rotterdam."] * 3 + [
        "alpha beta gamma delta epsilon zeta theta iota kappa lambda omicron sigma omega"
    ]
    verdict = judge_relatedness("Order 44121 was delivered to Rotterdam.", chunk)
    assert verdict.judged and verdict.support == 1.0
    assert "ord-44121" in text_terms("ORD-44121.")
    assert {"deliv", "rotte"} <= text_terms("Delivered to Rotterdam")


def test_the_backoff_grows_doubling_and_is_capped() -> None:
    assert [backoff_turns(n) for n in range(8)] == [0, 1, 2, 4, 8, 16, 32, 32]
    assert backoff_turns(10_000) == BACKOFF_MAX_TURNS


def test_a_failure_waits_and_a_success_clears_the_wait() -> None:
    first = backoff_after("empty", None, seq=41, owed=12)
    # One turn waits: the next turn (two messages on) does not fold, the one after does.
    assert first == FoldHealth(outcome="empty", failures=1, retry_after_seq=44, owed=12)
    assert not may_fold(first, 43) and may_fold(first, 44) and may_fold(first, 45)
    assert turns_left(first, 41) == 1 and turns_left(first, 43) == 0
    third = backoff_after("unrelated", backoff_after("failed:timeout", first, 45), 51)
    assert third is not None and third.failures == 3
    assert third.retry_after_seq == 51 + TURN_MESSAGES * 4 + 1
    assert [may_fold(third, 51 + 2 * t) for t in range(1, 6)] == [False] * 4 + [True]
    assert turns_left(third, 51) == 4 and turns_left(third, 53) == 3
    healed = backoff_after(None, third, 60)
    assert healed == FoldHealth(outcome="ok")
    assert may_fold(healed, 60)
    # A thread that never failed stays None: no row write.
    assert backoff_after(None, None, 60) is None
    assert same_health(None, FoldHealth()) and not same_health(None, third)


def test_an_erased_range_is_no_failure() -> None:
    assert backoff_after("erased", None, 9) is None
