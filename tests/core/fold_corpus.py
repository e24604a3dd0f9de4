"""The corpus the `unrelated` threshold is measured on: good summaries of many styles, and junk.

Good: the bench's offline summarizers folding the recall conversation chunk by chunk (the
compact `ReferenceSummarizer`, the extractive `VerboseSummarizer` and its compress answers),
and hand-written support threads (tool results, pasted logs, corrections) each with a terse
abstractive summary that paraphrases (written for this corpus, not tuned to the judge) and a
compact note list. Junk: unrelated sentences, chat replies to the summary request (to the
instruction, and to the thread's last message), and one junk sentence answered at every fold.
Each case is (label, summary, chunk texts, previous summary).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from bench.recall import (
    ANSWER_WORDS,
    ReferenceSummarizer,
    VerboseSummarizer,
    conversation,
)
from bounded_agents.core.messages import Message, ToolResult
from bounded_agents.core.ports import HistoryPolicyContext, HistorySummary, ThreadSummary


@dataclass(frozen=True)
class Case:
    label: str
    summary: str
    chunk: tuple[str, ...]
    previous: str | None


def _answer(n: int) -> str:
    words = " ".join(ANSWER_WORDS[(n * 7 + i) % len(ANSWER_WORDS)] for i in range(40 + n % 30))
    return f"Thanks, noted. {words}."


def recall_messages(turns: int, seed: int) -> list[Message]:
    """The bench's recall conversation as stored messages: each turn's user message, the tool
    result when it has one, and a scripted answer of the bench's length."""
    out: list[Message] = []
    for n, turn in enumerate(conversation(turns, seed=seed).turns):
        out.append(Message(role="user", content=turn.content, seq=len(out) + 1))
        if turn.tool_result is not None:
            result = ToolResult(call_id=f"c{n}", content=turn.tool_result)
            out.append(Message(role="assistant", content="", tool_results=[result]))
        out.append(Message(role="assistant", content=_answer(n), seq=len(out) + 1))
    return out


def texts(messages: list[Message]) -> tuple[str, ...]:
    return tuple(t for m in messages for t in (m.content, *(r.content for r in m.tool_results)))


FOLD = 12
"""Messages per fold: a window of 20 folding what it drops in batches, as the bench does."""

JUNK_SENTENCE = "The quick brown fox jumps over the lazy dog while the orchestra tunes its violins."
"""The one junk sentence a broken summarizer answers at every fold."""

UNRELATED = [
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
    "The Treaty of Westphalia ended the Thirty Years War in 1648 and reshaped European borders.",
    "To bake sourdough, feed the starter overnight, knead gently and proof the dough for hours.",
    "Jupiter has at least ninety-five moons, the largest of which is Ganymede.",
]
INSTRUCTION_REPLIES = [
    "Sure! Please paste the conversation you would like me to summarize and I will get started.",
    "I'd be glad to help. Could you share the messages or tell me what format you prefer for "
    "the summary?",
    "Of course. What would you like the summary to focus on? Let me know and I can tailor it.",
]


def _chat_reply(last: str) -> str:
    """What a chat model answers when it takes the summary request for the next chat turn: a
    reply to the thread's last message, in its own words."""
    return (
        "That sounds great, thanks for sharing! I really enjoy hearing about that kind of thing. "
        f"Regarding your last message ({last[:40].strip()}...), I think it is a lovely topic "
        "and I would be happy to chat more about it whenever you like. Anything else on your "
        "mind today?"
    )


async def _rolling(summarizer: object, messages: list[Message], label: str) -> list[Case]:
    """`summarizer` folding `messages` FOLD at a time, each fold handed the summary so far;
    for a summarizer that compresses, its compress answer of an over-long summary too."""
    cases: list[Case] = []
    previous: str | None = None
    ctx = HistoryPolicyContext(agent="a", thread_id="t", actor_id="u", run_id="r")
    for start in range(0, len(messages), FOLD):
        chunk = messages[start : start + FOLD]
        fold_ctx = ctx.model_copy(
            update={
                "summary": None
                if previous is None
                else ThreadSummary(text=previous, covers_through_seq=start)
            }
        )
        made: HistorySummary = await summarizer(chunk, fold_ctx)  # type: ignore[operator]
        cases.append(Case(label, made.text, texts(chunk), previous))
        previous = made.text
        if len(previous) > 4000 and isinstance(summarizer, VerboseSummarizer):
            task = fold_ctx.model_copy(
                update={
                    "summary": ThreadSummary(text=previous, covers_through_seq=0),
                    "fold_task": "compress",
                }
            )
            shorter = (await summarizer([], task)).text
            cases.append(Case(f"{label} (compress)", shorter, (), previous))
            previous = shorter
    return cases


def _junk_over(reference: list[Case]) -> list[Case]:
    """Junk answered in place of each reference fold (the good summary stays `previous`, as a
    refused fold leaves it)."""
    out: list[Case] = []
    for i, case in enumerate(reference):
        last = next((t for t in reversed(case.chunk) if t and not t.startswith("Thanks")), "")
        out.append(Case("junk: same sentence every fold", JUNK_SENTENCE, case.chunk, case.previous))
        out.append(
            Case("junk: unrelated", UNRELATED[i % len(UNRELATED)], case.chunk, case.previous)
        )
        out.append(
            Case(
                "junk: reply to the instruction",
                INSTRUCTION_REPLIES[i % len(INSTRUCTION_REPLIES)],
                case.chunk,
                case.previous,
            )
        )
        out.append(
            Case(
                "junk: chat reply to the last message", _chat_reply(last), case.chunk, case.previous
            )
        )
        if case.previous:
            # An appending summarizer: the notes so far, then junk as this fold's notes.
            appended = f"{case.previous}\n{JUNK_SENTENCE}"
            out.append(Case("junk: appended to the notes", appended, case.chunk, case.previous))
    return out


# --- hand-written support threads -----------------------------------------------------------

THREADS: list[dict[str, object]] = [
    {
        "chunk": (
            "Hi, my router keeps dropping the connection every evening around 8pm.",
            "Sorry to hear that. Which model is it, and is the firmware up to date?",
            "It's a Fritzbox 7590, firmware 7.29 I think. The ISP is Telenet.",
            "[tool result] lookup_device: model FRITZ!Box 7590, firmware 7.29, last reboot "
            "2026-11-30 19:58, DSL sync 98 Mbit/s, errors CRC 1432 in 24h",
            "The line shows many CRC errors. I'll open a line check with the ISP: ticket "
            "LN-55821. Meanwhile, please try the DSL cable directly in the wall socket.",
            "Ok, I moved the cable. Can you also send me a copy of the ticket by email to "
            "m.dubois@example.org?",
        ),
        "terse": "Evening disconnects on the customer's Fritzbox 7590 (fw 7.29, ISP Telenet); "
        "lots of CRC errors on the line. Line check requested with the provider, ticket "
        "LN-55821; customer rewired the DSL cable straight to the wall and wants the ticket "
        "emailed to m.dubois@example.org.",
        "notes": "- router: Fritzbox 7590, firmware 7.29, ISP Telenet\n- problem: connection "
        "drops every evening ~8pm; 1432 CRC errors in 24h\n- ticket LN-55821 (line check with "
        "ISP)\n- cable now plugged directly into the wall socket\n- send ticket copy to "
        "m.dubois@example.org",
    },
    {
        "chunk": (
            "I was charged twice for invoice INV-2026-0917, 249.00 EUR each time.",
            "Let me check the payments on your account.",
            "[tool result] payments: 2026-11-02 249.00 EUR card ****4417 captured; 2026-11-02 "
            "249.00 EUR card ****4417 captured; refunds: none",
            "You're right, the second capture is a duplicate. I've requested a refund of 249.00 "
            "EUR, reference RF-3310. It takes 5 to 7 business days.",
            "Thanks. Actually please refund to my other card ending 9021 instead.",
            "Refunds can only go back to the original card ****4417, I'm afraid.",
        ),
        "terse": "Double charge on INV-2026-0917 (2 x 249.00 EUR on card 4417, 2 Nov). Refund "
        "RF-3310 raised for one payment, 5-7 business days. Customer asked for it to go to card "
        "9021; told it can only return to the original card 4417.",
        "notes": "- invoice INV-2026-0917 charged twice (249.00 EUR each, 2026-11-02, card "
        "****4417)\n- refund RF-3310 requested, 5-7 business days\n- refund must go to original "
        "card ****4417 (customer asked for card 9021: not possible)",
    },
    {
        "chunk": (
            "Our deploy fails since this morning. Here's the log:",
            "2026-12-03T09:14:02Z ERROR pg_dump: error: connection to server at "
            '"10.4.2.17", port 5432 failed: FATAL: password authentication failed for user '
            '"backup"\n2026-12-03T09:14:02Z INFO retry 1/3\n2026-12-03T09:14:07Z ERROR same',
            "The backup user's password was rotated last night by the vault policy. Update the "
            "secret DB_BACKUP_PASSWORD in the pipeline settings.",
            "Done, but now it says permission denied for schema billing.",
            "The backup role needs USAGE on billing: GRANT USAGE ON SCHEMA billing TO backup;",
            "That worked, thanks. We'll add it to the Terraform module too.",
        ),
        "terse": "Deploy broke this morning: pg_dump could not authenticate as the backup "
        "role against 10.4.2.17:5432 after the vault rotated its password. Fixed by updating "
        "DB_BACKUP_PASSWORD in the pipeline, then granting USAGE on schema billing to backup; "
        "they will put the grant in Terraform.",
        "notes": "- deploy failing: pg_dump auth failed for user backup at 10.4.2.17:5432\n- "
        "cause: vault rotated the backup password; DB_BACKUP_PASSWORD updated in pipeline\n- "
        "then: permission denied for schema billing; fixed with GRANT USAGE ON SCHEMA billing TO "
        "backup\n- follow-up: add the grant to the Terraform module",
    },
    {
        "chunk": (
            "We'd like to move our team of 14 from the Starter plan to Business.",
            "Business is 18 EUR per seat per month billed yearly, or 22 monthly.",
            "Yearly then. Can we keep our current workspace URL acme-design?",
            "Yes, the workspace and its URL stay. The upgrade takes effect at once and we "
            "prorate the remaining Starter period.",
            "Great. Our finance contact is Sofia Brandt, she needs the quote.",
            "I'll send quote Q-7781 to Sofia Brandt today.",
        ),
        "terse": "Team of 14 upgrading from Starter to Business, billed yearly at 18 EUR a seat "
        "monthly; workspace acme-design stays, change is immediate with proration. Quote Q-7781 "
        "going to their finance contact Sofia Brandt.",
        "notes": "- 14 seats: Starter -> Business, yearly billing (18 EUR/seat/month)\n- keep "
        "workspace URL acme-design\n- upgrade immediate, Starter prorated\n- quote Q-7781 to "
        "Sofia Brandt (finance)",
    },
    {
        "chunk": (
            "My parcel hasn't arrived. Order 88213, it was due Tuesday.",
            "[tool result] tracking 1Z84F0A2E1: 2026-12-01 out for delivery; 2026-12-01 "
            "delivery attempted, recipient absent; held at depot Ghent-Noord until 2026-12-08",
            "The courier tried on Tuesday and nobody was home; it's held at the Ghent-Noord "
            "depot until 8 December.",
            "I was home all day! Can you redeliver on Saturday?",
            "I've booked a redelivery for Saturday 6 December between 9 and 13h and flagged the "
            "failed attempt for the carrier.",
            "Thank you.",
        ),
        "terse": "Order 88213 missed on Tuesday: carrier says nobody home (customer disputes "
        "it), parcel 1Z84F0A2E1 waiting at the Ghent-Noord depot until 8 Dec. Redelivery set "
        "for Sat 6 Dec, 9-13h; complaint about the attempt passed to the carrier.",
        "notes": "- order 88213, tracking 1Z84F0A2E1, due Tuesday\n- delivery attempt failed "
        "(recipient absent) - customer says they were home\n- held at depot Ghent-Noord until "
        "2026-12-08\n- redelivery booked Sat 2026-12-06 9-13h; failed attempt flagged",
    },
    {
        "chunk": (
            "Can you change the meeting with the auditors? Thursday doesn't work anymore.",
            "Sure. They proposed Friday 10:00 or Monday 14:30.",
            "Monday 14:30, room B-204. And invite Lars Eriksen as well.",
            "Booked: Monday 14:30 in B-204 with the auditors and Lars Eriksen.",
            "Oh wait, make it B-301, B-204 is too small.",
            "Changed to B-301.",
        ),
        "terse": "Auditor meeting moved off Thursday to Monday 14:30 in room B-301 (changed "
        "from B-204, too small); Lars Eriksen invited too.",
        "notes": "- auditors meeting: Monday 14:30 (Thursday cancelled; Friday 10:00 declined)\n"
        "- room B-301 (was B-204)\n- Lars Eriksen invited",
    },
    {
        "chunk": (
            "My daughter is allergic to peanuts, can the birthday cake be made without them?",
            "Yes, our bakery can do a nut-free cake, but the kitchen handles nuts, so we can't "
            "guarantee traces are absent.",
            "Hmm. What about the gluten-free one, same kitchen?",
            "Same kitchen, yes. Some customers bring their own cake for allergies.",
            "Okay, we'll bring our own cake and just book the party room for 12 kids on the 21st.",
            "Party room booked for 12 children on the 21st, 15:00-17:00. No cake from us.",
        ),
        "terse": "Child has a peanut allergy; bakery can't rule out nut traces (shared kitchen, "
        "also for gluten-free). Family brings their own cake; party room reserved for 12 kids "
        "on the 21st, 15:00-17:00, no cake ordered.",
        "notes": "- daughter allergic to peanuts\n- nut-free cake possible but traces not "
        "guaranteed (shared kitchen)\n- they bring their own cake\n- party room: 12 kids, 21st, "
        "15:00-17:00",
    },
    {
        "chunk": (
            "The API returns 429 for us since we added the second region.",
            "[tool result] rate_limits: org org_5521, limit 6000 req/min shared across "
            "regions; last hour peak 7420 req/min (eu-west 4100, us-east 3320)",
            "Both regions share one limit of 6,000 requests per minute; your peak was 7,420.",
            "Can it be raised to 10,000?",
            "I've filed the increase to 10,000 req/min as request LIM-2093; approval usually "
            "takes two days. Until then, add backoff on 429 responses.",
            "Ok, we'll add exponential backoff.",
        ),
        "terse": "Getting 429s since adding a second region: org_5521 shares 6000 req/min "
        "across eu-west and us-east and peaked at 7420. Raise to 10000 filed as LIM-2093 "
        "(about 2 days); meanwhile they're adding exponential backoff.",
        "notes": "- 429 errors since second region added\n- org org_5521: limit 6000 req/min "
        "shared; peak 7420 (eu-west 4100, us-east 3320)\n- increase to 10000 req/min requested: "
        "LIM-2093 (~2 days)\n- client adds exponential backoff on 429",
    },
]


LOOSE = [
    "Home internet cuts out each night; diagnostics point at a noisy phone line, so the "
    "provider will inspect it (LN-55821). Customer tried a direct wall connection and wants "
    "the case number by mail.",
    "Customer paid one bill twice; we agreed to return the extra payment (RF-3310), which "
    "can only go back to the card originally used, within about a week.",
    "Nightly backups stopped because a rotated secret broke the database login; after the "
    "pipeline secret was replaced a missing schema grant had to be added, which the team "
    "will codify in infrastructure code.",
    "Company moving fourteen people to the higher tier with annual billing, keeping their "
    "workspace address; pricing quote Q-7781 goes to Sofia Brandt in finance.",
    "A missed delivery the customer disputes; the package waits at the local depot and a "
    "weekend redelivery is arranged.",
    "Auditor session rescheduled to early next week in a bigger room, B-301, with Lars "
    "Eriksen joining.",
    "Kid's birthday: allergy makes the bakery's cakes unsafe, so the family brings a cake; "
    "we only reserved the party space for a dozen children.",
    "Throttling errors after expanding to another region, because both regions share one "
    "quota; a higher quota is pending (LIM-2093) and the client will retry with backoff.",
]
"""Very loose paraphrases (few words of the thread kept): the far end of a good summarizer."""


def _handwritten() -> tuple[list[Case], list[Case]]:
    good: list[Case] = []
    junk: list[Case] = []
    for i, thread in enumerate(THREADS):
        chunk = thread["chunk"]
        assert isinstance(chunk, tuple)
        for style in ("terse", "notes"):
            text = thread[style]
            assert isinstance(text, str)
            good.append(Case(f"hand-written: {style}", text, chunk, None))
        good.append(Case("hand-written: loose paraphrase", LOOSE[i], chunk, None))
        # The same thread folded on top of the previous thread's notes (a rolling summary):
        if i:
            previous = THREADS[i - 1]["notes"]
            assert isinstance(previous, str)
            notes = thread["notes"]
            assert isinstance(notes, str)
            good.append(
                Case("hand-written: notes, rolled", f"{previous}\n{notes}", chunk, previous)
            )
            good.append(
                Case("hand-written: notes, appended", f"{previous}\n{notes}", chunk, previous)
            )
        junk.append(Case("junk: same sentence every fold", JUNK_SENTENCE, chunk, None))
        junk.append(Case("junk: unrelated", UNRELATED[i % len(UNRELATED)], chunk, None))
        junk.append(Case("junk: reply to the instruction", INSTRUCTION_REPLIES[i % 3], chunk, None))
        junk.append(
            Case("junk: chat reply to the last message", _chat_reply(chunk[-1]), chunk, None)
        )
    return good, junk


def corpus() -> tuple[list[Case], list[Case]]:
    """(good summaries, junk), over two seeds of the bench conversation and the hand-written
    threads."""
    good: list[Case] = []
    junk: list[Case] = []
    for seed in (0, 1):
        messages = recall_messages(120, seed)
        reference = asyncio.run(_rolling(ReferenceSummarizer(), messages, "reference (compact)"))
        good += reference
        good += asyncio.run(_rolling(VerboseSummarizer(), messages, "verbose (extractive)"))
        junk += _junk_over(reference)
    written_good, written_junk = _handwritten()
    return good + written_good, junk + written_junk
