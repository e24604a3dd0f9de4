"""Attacks on `clip_summary` and `fold_rejection` (issue 25): the last resort must cut only
what does not fit, and an answer that does not stand for the conversation must be refused."""

from __future__ import annotations

import pytest

from bounded_agents.core.ports import HistorySummary
from bounded_agents.core.summary import CLIP_NOTE, clip_summary, fold_rejection, summary_fits

CAP = 300
LIMIT = (CAP - 4) * 4
"""The characters `clip_summary` lets a summary of `CAP` estimated tokens keep."""


@pytest.mark.parametrize("gap", ["\n" * 8, "\n\n" + " " * 40, "\n" * 100])
def test_a_clipped_summary_carried_forward_with_blank_lines_keeps_all_that_fits(gap: str) -> None:
    """A summary that was clipped before carries `CLIP_NOTE` forward (the instruction asks it
    to); a model may put blank lines after it. With the note set aside, the notes below it fit
    the cap, so nothing of them may be cut. It was: the slice start went negative and only the
    last few characters survived (5 of 1,083 with eight newlines)."""
    body = ("- order ORD-1 ships on 2026-05-02 to Lyon\n" * 40)[: LIMIT - len(CLIP_NOTE) - 6]
    body = body.strip()
    text = f"{CLIP_NOTE}{gap}{body}"
    assert not summary_fits(text, CAP), "the whitespace pushes it over: the clip path runs"
    kept = clip_summary(text, CAP)
    assert summary_fits(kept, CAP)
    assert kept == f"{CLIP_NOTE}\n{body}", f"kept {len(kept)} of {len(body)} characters"


@pytest.mark.parametrize(
    "text",
    [
        "I'm sorry, but I can't help with that.",
        "I cannot assist with summarizing this conversation.",
        "As an AI language model, I am unable to process this request.",
    ],
)
def test_a_refusal_written_as_text_is_refused(text: str) -> None:
    """A safety-tuned model asked to summarize personal data often answers with a refusal
    sentence and `finish_reason: stop`. Stored, it REPLACES the previous summary and every
    message it stood for, the very loss the issue found for an empty answer."""
    assert fold_rejection(HistorySummary(text=text, finish_reason="stop")) == "refused"


def test_a_summary_that_mentions_an_apology_later_is_a_summary() -> None:
    text = "- the user asked for a refund\n- I'm sorry was said by support on 2027-01-02"
    assert fold_rejection(HistorySummary(text=text, finish_reason="stop")) is None
    long = "I'm sorry to hear about the delay; " + "- order ORD-1 delayed. " * 40
    assert fold_rejection(HistorySummary(text=long, finish_reason="stop")) is None


@pytest.mark.parametrize("text", ["\ufffd" * 10, "\x00" * 10, "...", " - \n - ", "\U0001f44d"])
def test_an_answer_without_a_letter_or_digit_of_any_script_is_empty(text: str) -> None:
    """A summarizer answering ten NULs (which the fold replaces by U+FFFD before judging) was
    stored, and led every later view: not blank, and the relatedness judge leaves alone a text
    in a script it cannot read (found by attack through an adapter)."""
    assert fold_rejection(HistorySummary(text=text)) == "empty"


@pytest.mark.parametrize("text", ["东京的订单已经发货", "42", "- ORD-1"])
def test_an_answer_in_any_script_or_of_digits_alone_is_not_empty(text: str) -> None:
    assert fold_rejection(HistorySummary(text=text)) is None
