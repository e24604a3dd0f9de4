"""What the next turn would send, read the way a turn reads (`GET .../window`)."""

from __future__ import annotations

from bounded_agents.core.fold_health import owed_count
from bounded_agents.core.history.powers import policy_summarizer
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicyContext, Thread
from bounded_agents.core.report import RunReport
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.deps import TurnDeps
from bounded_agents.core.turn.load import fold_range, page_context, read_page, turn_policy
from bounded_agents.core.turn.public import FoldPreview, WindowPreview


async def preview(
    deps: TurnDeps, thread_id: str, actor_id: str, thread: Thread | None = None
) -> WindowPreview:
    """What the next turn would send of the existing messages, read the way a turn reads.

    `select` runs over them plus a stand-in for the next user message (which always rides), so
    `kept` is exactly the history the next turn keeps. `dropped` lists what this read saw and
    the next turn will not send; under a read bound older messages are not read at all. For a
    summarizing policy it shows the thread's summary and the fold the next turn would make if
    it came now (nothing is summarized here: folds happen only in turns), the thread's idle
    time included (`WindowHistory.cold`).
    """
    if thread is None or thread.id != thread_id or thread.actor_id != actor_id:
        thread = await deps.owned_thread(thread_id, actor_id)
    definition = deps.definition(thread.agent)
    policy, bound = turn_policy(deps, definition)  # as a turn now would cut it
    summarizer = policy_summarizer(policy)
    report = RunReport(run_id="preview")
    page = await read_page(deps, thread_id, bound, report, summary=summarizer is not None)
    # A turn now would find the thread idle since its last activity (`updated_at`).
    ctx = page_context(
        HistoryPolicyContext(
            thread_id=thread_id,
            agent=thread.agent,
            actor_id=actor_id,
            run_id="preview",
            cache_ttl_seconds=deps.limits.cache_ttl_seconds,
        ),
        page,
        deps.idle_seconds(thread.updated_at),
    )
    next_message = Message(role="user", content="")
    selection = policy.select([*page.messages, next_message], ctx)
    kept = [m for m in selection.keep if m is not next_message]
    tokens = [estimate_message_tokens(m) for m in kept]
    next_fold = None
    if summarizer is not None:
        boundary, through = fold_range(page, selection)
        if through > boundary:
            # Counted as the turn's fold counts it (`owed_count`): the page's messages in the
            # span, and the store's count of those the read left unread.
            owed: dict[str, object] = {
                "through": through,
                "messages": [{"seq": m.seq} for m in page.messages if (m.seq or 0) <= through],
            }
            if page.unread is not None:
                owed["unread"] = page.unread
            next_fold = FoldPreview(
                from_seq=boundary + 1, through_seq=through, messages=owed_count(owed, boundary)
            )
    return WindowPreview(
        thread_id=thread_id,
        agent=thread.agent,
        read_bound=report.read_bound,
        read_token_bound=report.read_token_bound,
        read_run_bound=report.read_run_bound,
        kept=kept,
        dropped=selection.drop,
        summarizes=next_fold is not None,
        summary=page.summary,
        next_fold=next_fold,
        tokens=tokens,
        total_tokens=sum(tokens),
    )


__all__ = ["preview"]
