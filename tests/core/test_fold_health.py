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
    # 96: terms the previous summary already held are not judged again (new_part).
    assert len(judged) >= 90
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
    short = judge_relatedness("- nothing noted yet", ["hi", "hello, how can I help?"])
    assert short.related and not short.judged


@pytest.mark.parametrize(
    ("answer", "first"),
    [
        ("Sure! Please paste the conversation.", True),
        ("N/A", True),
        ("- nothing noted yet", False),
        ("Here's a concise summary of the conversation so far:", False),
    ],
)
def test_an_answer_sharing_no_term_with_a_large_source_is_refused_however_short(
    answer: str, first: bool
) -> None:
    """Found by attack: under MIN_SUMMARY_TERMS terms an answer was "too small to judge", so
    a chat reply to the summary request was stored at every fold of a 60-turn chat (9 of 9),
    and the summary said nothing of any order. A deploy-failure chunk has dozens of terms.
    After a first fold any such answer is refused (it would wipe the notes); at the first, one
    in words of its own may say there is nothing to note."""
    chunk = [str(t) for t in THREADS[2]["chunk"]]  # type: ignore[attr-defined]
    later = judge_relatedness(answer, chunk, str(THREADS[0]["notes"]))
    assert later.source_terms >= MIN_SOURCE_TERMS
    assert later.judged and not later.related
    assert judge_relatedness(answer, chunk, None).related is not first


def test_a_summary_in_a_script_the_terms_cannot_read_is_not_judged() -> None:
    """`text_terms` reads ASCII letters and digits: a faithful Russian summary of a chunk
    with an English traceback has no terms, so it is not judged (the review of the first
    version found it refused at every fold, as "chat words only")."""
    chunk = [
        "Деплой упал, вот лог:",
        "Traceback (most recent call last): File app/db.py line 142 in connect "
        "psycopg2.OperationalError could not connect to server: Connection refused. "
        "Is the server running on host 10.0.4.17 and accepting TCP/IP connections "
        "on port 5432? Security group sg-0a1b2c rotated yesterday, rollback pending.",
        "Откатили группу безопасности, всё работает.",
    ]
    summary = "- Деплой упал: база данных недоступна; решение — откатить группу безопасности."
    for previous in (None, "- Деплой на стенд: проблемы с базой данных."):  # noqa: RUF001
        verdict = judge_relatedness(summary, chunk, previous)
        assert verdict.source_terms >= MIN_SOURCE_TERMS
        assert verdict.related and not verdict.judged


@pytest.mark.parametrize(
    "place",
    [
        "prepended",
        "inserted",
        "respaced and appended",
        "chat around the notes",
        "glued to an old line",
        "old lines re-punctuated",
    ],
)
def test_a_junk_line_anywhere_among_the_notes_is_judged_alone(place: str) -> None:
    """Found by attack: only junk appended byte for byte after the notes was judged alone;
    anywhere else the notes vouched for it (support 0.66 to 0.85, stored)."""
    notes = str(THREADS[0]["notes"])
    chunk = tuple(str(t) for t in THREADS[1]["chunk"])  # type: ignore[attr-defined]
    lines = notes.splitlines()
    summary = {
        "prepended": f"{JUNK_SENTENCE}\n{notes}",
        "inserted": "\n".join([*lines[:1], JUNK_SENTENCE, *lines[1:]]),
        "respaced and appended": notes.replace("\n", "\n\n") + "\n" + JUNK_SENTENCE,
        "chat around the notes": "Sure, happy to help! Here is the updated summary:\n"
        + notes
        + "\nPlease paste the next part of the conversation and I will update it.",
        "glued to an old line": "\n".join([f"{lines[0]} {JUNK_SENTENCE}", *lines[1:]]),
        "old lines re-punctuated": "\n".join(f"{line};" for line in lines) + "\n" + JUNK_SENTENCE,
    }[place]
    assert not judge_relatedness(summary, chunk, notes).related


SUPPORT_CHAT = [
    "Hi, my order A-20931 placed 2026-03-03 still hasn't shipped. I paid 1,249.00 USD.",
    "Sorry about that. A-20931 waits on stock from the supplier; the new ETA is 2026-03-17.",
    "If it isn't here by 2026-03-20 I want a full refund to my Mastercard ending 5521.",
    "Noted: if A-20931 hasn't shipped by 2026-03-20 we refund 1,249.00 USD to card 5521.",
    "Also move my installation from 09:30 to 14:00-16:00 on 2026-04-07, ref INST-4471.",
    "Done, fee waived. The quote stays at 10,000 NOK. I ordered three lamps, two chairs.",
]


@pytest.mark.parametrize(
    "summary",
    [
        "Order A-20931 (placed March 3rd, $1249) waits on supplier stock, ETA March 17th. "
        "Refund to Mastercard 5521 if not shipped by March 20th.",
        "- Order A-20931, placed 3/3/2026, $1249 USD\n- ETA 3/17; refund to card 5521 after 3/20",
        "1. A-20931 delayed, 1249 USD paid\n2. Refund to 5521 if late\n3. INST-4471 moved "
        "from 9:30am to 2-4pm on April 7\n4. Quote 10000 NOK\n5. 3 lamps, 2 chairs ordered",
    ],
    ids=["dates-in-words", "us-dates", "numbered-list"],
)
def test_a_faithful_summary_that_rewrites_its_numbers_is_not_taken_for_invented(
    summary: str,
) -> None:
    """The review of the identifier check found 7 of 23 faithful summaries refused: list
    numbers, "3rd", "$1249" for "1,249.00 USD", "3/3/2026" for "2026-03-03" counted as
    invented identifiers. Numbers are compared by value, and small ones are not identifiers."""
    assert judge_relatedness(summary, SUPPORT_CHAT).related


def test_a_run_of_more_digits_than_python_converts_is_judged_not_raised() -> None:
    """Found by review: numbers were compared by `int()`, which refuses a run of more than
    4,300 digits; a pasted blob holding one made the judge raise (and the turn fail)."""
    blob = "7" * 5000
    chunk = [*SUPPORT_CHAT, f"the export blob: {blob}"]
    assert judge_relatedness("- A-20931 delayed; 1249 USD, card 5521, 10000 NOK", chunk).related
    assert judge_relatedness(f"- blob 0{blob} kept; 5521, 1249, 10000", chunk).related


def test_another_threads_summary_is_refused_by_its_identifiers() -> None:
    """Found by attack: a summary of another customer's thread shared the words of any
    support thread (order, refund, delivered: support 0.72) and was stored; none of its
    customer's numbers is in the chunk."""
    chunk = [
        "Hi, I'm Maria Jensen. My order ORD-58231 from March 3 never arrived.",
        "Sorry to hear that, Maria. I see ORD-58231 marked as delivered to the door.",
        "There was no parcel. I'd like a refund of 89.99 GBP to my Visa ending 4242.",
        "I've opened case CAS-7712 for the carrier and requested the refund.",
        "Also please change my delivery address to 14 Elm Road for the next order.",
    ]
    other = (
        "- Customer Tom Berg: order ORD-77120 placed April 2 has not arrived; tracking says "
        "delivered, no parcel at door.\n- Refund of 45.99 GBP to Visa ending 1111 requested; "
        "delivery address change to 9 Baker Street asked.\n- Ticket CAS-9034 closed without "
        "an answer; reopen requested."
    )
    faithful = (
        "- Maria Jensen: ORD-58231 (March 3) marked delivered, no parcel; refund 89.99 GBP to "
        "Visa 4242 requested, case CAS-7712 with the carrier.\n- New address: 14 Elm Road."
    )
    assert not judge_relatedness(other, chunk).related
    assert judge_relatedness(faithful, chunk).related


def test_a_summary_sharing_no_term_with_a_small_source_is_refused() -> None:
    """Too small a source to judge support by, but the junk sentence shares nothing with it;
    a summary that shares one term of its own words is still accepted unjudged."""
    chunk = ["hi", "hi", "ok thanks", "ok thanks", "sure, my cat Lena is unwell", "sure"]
    junk = judge_relatedness(JUNK_SENTENCE, chunk, None)
    assert junk.source_terms < MIN_SOURCE_TERMS and junk.judged and not junk.related
    # A chat word shared is no evidence: the attack's "Thanks! The quick brown fox..." passed.
    assert not judge_relatedness(f"Thanks! {JUNK_SENTENCE}", chunk, None).related
    loose = judge_relatedness("Small talk so far; the cat, Lena, is sick. Greetings.", chunk)
    assert loose.related and not loose.judged


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


def test_a_chat_reply_for_a_small_chunk_is_refused_even_after_it_was_stored() -> None:
    """Found by attack: with folds of 4 items (15 terms, under `MIN_SOURCE_TERMS`), "Sure! How
    can I help you today?" was too small to judge and stored at every fold; stored once, its
    words were the previous summary's and vouched for it."""
    reply = "Sure! How can I help you today?"
    chunk = [
        "What is the status of invoice 1000 for Contoso?",
        "[tool output] invoice 1000: paid on 2024-03-01",
        "Invoice 1000 was paid on March 1.",
    ]
    assert not judge_relatedness(reply, chunk).related
    assert not judge_relatedness(reply, chunk, previous=reply).related
    # Chat words the chunk said are no evidence (a small talk fold may be refused: one turn
    # of backoff), but a note of words of its own is not chat: "- nothing noted yet" passes.
    assert judge_relatedness("- nothing noted yet", ["hi", "ok", "thanks"]).related
