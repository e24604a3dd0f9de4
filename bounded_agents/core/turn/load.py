"""The turn's reads and writes: the bounded read, `load:thread`, messages and summaries stored."""

from __future__ import annotations

from bounded_agents.core.checkpoints import (
    FoldPayload,
    JsonObject,
    load_thread_payload,
    seq_payload,
    summary_saved_payload,
)
from bounded_agents.core.history.powers import calibrated_policy, read_bound
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import (
    HistoryPolicy,
    HistoryPolicyContext,
    HistorySelection,
    JsonValue,
    ReadBound,
    ThreadSummary,
    ThreadTurnPage,
    ThreadTurnQuery,
    Transaction,
)
from bounded_agents.core.report import RunReport
from bounded_agents.core.turn.constants import BACKLOG_READ_ROWS
from bounded_agents.core.turn.deps import TurnDeps
from bounded_agents.core.turn.kept import keep_refs, whole_keep
from bounded_agents.core.turn.public import AgentDefinition
from bounded_agents.core.turn.state import Digest, Turn
from bounded_agents.errors import DuplicateMessage


async def load_thread(deps: TurnDeps, turn: Turn, tx: Transaction | None) -> JsonValue:
    """The `load:thread` step: the bounded read, `select`, and for a summarizing policy the
    fold this turn owes: every message from the summary's boundary through the newest one
    `select` dropped or the read skipped. The kept messages are journaled by seq
    (`core/turn/kept.py`) and handed to the prompt builder as read (`turn.kept`). The fold's
    messages that the page holds are journaled whole (seq and run id included: a summarizer
    may group by run); older ones are read chunk by chunk by the fold itself. With `tx` the
    read sees the turn's own user message, written in the same unit."""
    policy, bound = turn_policy(deps, turn.definition)
    summarizer = turn.definition.summarizer
    page = await read_page(
        deps, turn.request.thread_id, bound, turn.report, tx=tx, summary=summarizer is not None
    )
    # The idle time is taken here, inside the step: a replay reads the selection back.
    idle = deps.idle_seconds(page.previous_at)
    selection = policy.select(page.messages, page_context(turn.hctx, page, idle))
    summary: JsonObject | None = None
    fold: FoldPayload | None = None
    if summarizer is not None:
        boundary, through = fold_range(page, selection)
        if page.summary is not None:
            summary = page.summary.model_dump(mode="json", exclude_defaults=True)
        if through > boundary:
            fold = {
                "through": through,
                "messages": [
                    m.model_dump(mode="json", exclude_defaults=True)
                    for m in page.messages
                    if (m.seq or 0) <= through
                ],
            }
            if page.fold_health is not None:  # issue 36: the backoff decides from the journal
                fold["health"] = page.fold_health.model_dump(mode="json")
            if page.unread is not None and page.unread != page.skipped:
                fold["unread"] = page.unread  # erased messages left seqs, not messages, unread
                fold["unread_net"] = True  # what the fold takes comes off it (`owed_count`)
    # The run's prompt is built from the messages as read; the journal names them by seq, or
    # holds them whole on a store that cannot read them back by seq.
    turn.kept = list(selection.keep)
    by_seq = deps.store.reads_by_seq
    payload = load_thread_payload(
        keep_refs(selection.keep, page.messages) if by_seq else whole_keep(selection.keep),
        by_seq=by_seq,
        last_prompt=page.last_prompt,
        summary=summary,
        fold=fold,
        title=page.title,
        has_assistant_message=page.has_assistant_message,
    )
    if not by_seq:
        seqs = [m.seq for m in selection.keep if m.seq is not None]
        if (
            seqs
            and len(seqs) == len(selection.keep)
            and seqs != list(range(seqs[0], seqs[0] + len(seqs)))
        ):
            payload["keep_seqs"] = seqs  # a gap (an erased message): `kept.numbered_keep`
    clearing = turn.definition.clearing
    if clearing is not None:  # journaled with the selection: a replay clears the same
        payload["clearing"] = clearing.model_dump(mode="json")
    return payload


def turn_policy(
    deps: TurnDeps, definition: AgentDefinition
) -> tuple[HistoryPolicy, ReadBound | None]:
    """The agent's policy with its token limits in the model's own tokens, by the ratio
    learned from its reported usage (`CalibratedPolicy`; 1.0, the policy as declared, until a
    provider reports), and the read bound that goes with it. A token window of 8,000 for a
    model that counts 1.6 tokens per estimated one keeps 4,923 estimated tokens."""
    ratio = deps.learned.tokens.ratio(deps.model_name)
    policy = calibrated_policy(definition.policy, ratio)
    if policy is definition.policy:
        return policy, definition.bound
    return policy, read_bound(policy)


async def persist(
    deps: TurnDeps,
    turn: Turn,
    message: Message,
    *,
    tx: Transaction | None,
    digest: Digest | None = None,
) -> JsonValue:
    """A `persist:*` step: store `message` in the turn's thread. Idempotent: a replay after a
    crash between the write and its journal entry finds the message already stored (one per
    run and role) and does not store it twice. (In a shared transaction the two commit
    together; a journal written before that may still differ.) An answer's `digest` is kept in
    the same write by a store that keeps prompt digests."""
    prompt, reported = (digest.prompt, digest.reported) if digest is not None else (None, None)
    try:
        stored = await deps.store.append(
            turn.request.thread_id, [message], tx=tx, last_prompt=prompt, reported_tokens=reported
        )
        return seq_payload(stored[0].seq)
    except DuplicateMessage:
        return seq_payload(None)


async def read_page(
    deps: TurnDeps,
    thread_id: str,
    bound: ReadBound | None,
    report: RunReport,
    *,
    summary: bool,
    tx: Transaction | None = None,
) -> ThreadTurnPage:
    """The turn read: bounded by the store when it can (one round trip), else the whole thread
    cut the same way in memory; `summary`: read after the thread's summary. The report says
    what was actually read."""
    query = ThreadTurnQuery.of(thread_id, bound, after_summary=summary, count_unread=summary)
    read = await deps.store.read(query, tx=tx)
    page = read.page
    if read.bounded:
        report.read_bound = query.message_limit
        report.read_token_bound = query.token_limit
        report.read_run_bound = query.run_limit
    if page.summary is not None:
        report.read_after_seq = page.summary.covers_through_seq
    # Unbounded: no bound reached the store, all of it was read and is counted.
    report.rows_read = len(read.read)
    report.bytes_read = read.payload_bytes
    return page


async def fetch_backlog(
    deps: TurnDeps, thread_id: str, known: dict[int | None, Message], span: tuple[int, int]
) -> None:
    """Fill `known` with the stored messages of `span` (after seq, through seq) that the fold
    does not hold yet: only the gap up to the next one it holds, one bounded page."""
    after_seq, through = span
    held = [s for s in known if s is not None and after_seq < s <= through]
    rows = min(BACKLOG_READ_ROWS, (min(held) if held else through + 1) - after_seq - 1)
    for m in await deps.store.messages_after(thread_id, after_seq, max(1, rows)):
        if m.seq is not None and m.seq <= through:
            known.setdefault(m.seq, m)


async def save_summary(
    deps: TurnDeps, thread_id: str, summary: ThreadSummary, *, tx: Transaction | None
) -> JsonValue:
    """A `persist:summary` step: the thread's new rolling summary (idempotent per boundary)."""
    await deps.store.save_summary(thread_id, summary, tx=tx)
    return summary_saved_payload(summary.covers_through_seq)


def fold_range(page: ThreadTurnPage, selection: HistorySelection) -> tuple[int, int]:
    """(the summary's boundary, the last seq the turn must fold): through the newest message
    `select` dropped, and through every message the read skipped, so none is left both out of
    the prompt and out of the summary. Equal when there is nothing to fold."""
    boundary = page.summary.covers_through_seq if page.summary is not None else 0
    through = max((m.seq or 0 for m in selection.drop), default=boundary)
    if page.skipped:
        through = max(through, boundary + page.skipped)
    return boundary, through


def page_context(
    hctx: HistoryPolicyContext, page: ThreadTurnPage, idle_seconds: float | None = None
) -> HistoryPolicyContext:
    """What `select` learns from the read: the summary, where its messages start, and how long
    the thread sat idle before this turn (None: not measured)."""
    return hctx.model_copy(
        update={
            "summary": page.summary,
            "skipped": page.skipped,
            "tokens_before": page.tokens_before,
            "reported_tokens": page.reported_tokens,
            "idle_seconds": idle_seconds,
        }
    )


__all__ = [
    "fetch_backlog",
    "fold_range",
    "load_thread",
    "page_context",
    "persist",
    "read_page",
    "save_summary",
]
