"""The summary archive's SQL (`SummaryArchive`): parts of a summary kept instead of clipped.

A part is keyed by (thread, from_seq, to_seq): archiving is an INSERT ... ON CONFLICT DO
NOTHING, so a fold replayed after a crash archives its part once, and the text first written
stays. The search index (migration 0012) follows the table by its triggers; erasure deletes a
thread's parts with it, and the parts covering an erased seq (`bounded_agents.store.erase`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from bounded_agents.core.messages import Message, unstorable_text
from bounded_agents.core.ports import ArchivedPart
from bounded_agents.errors import InvalidContent
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.schema import summary_archive

_COLS = (
    summary_archive.c.from_seq,
    summary_archive.c.to_seq,
    summary_archive.c.content,
    summary_archive.c.created_at,
)


async def archive_part(
    conn: AsyncConnection, thread_id: str, from_seq: int, to_seq: int, content: str
) -> ArchivedPart:
    """Store the part (once per range) and return what the table holds for the range."""
    if from_seq > to_seq or from_seq < 0:
        raise ValueError(f"an archived part covers from_seq <= to_seq, not {from_seq}..{to_seq}")
    reason = unstorable_text(Message(role="assistant", content=content))
    if reason is not None:
        raise InvalidContent(reason)
    values = {
        "thread_id": thread_id,
        "from_seq": from_seq,
        "to_seq": to_seq,
        "content": content,
    }
    insert = dialect_of(conn).insert
    await conn.execute(insert(summary_archive).values(values).on_conflict_do_nothing())
    row = (
        await conn.execute(
            sa.select(*_COLS).where(
                summary_archive.c.thread_id == thread_id,
                summary_archive.c.from_seq == from_seq,
                summary_archive.c.to_seq == to_seq,
            )
        )
    ).one()
    return _part(row)


async def parts(
    conn: AsyncConnection, thread_id: str, limit: int, before_seq: int | None
) -> list[ArchivedPart]:
    """Newest range first, at most `limit`, ending before `before_seq` when given."""
    stmt = sa.select(*_COLS).where(summary_archive.c.thread_id == thread_id)
    if before_seq is not None:
        stmt = stmt.where(summary_archive.c.to_seq < before_seq)
    stmt = stmt.order_by(summary_archive.c.to_seq.desc(), summary_archive.c.from_seq.desc())
    return [_part(r) for r in (await conn.execute(stmt.limit(limit))).all()]


def _part(row: Any) -> ArchivedPart:
    at: datetime | None = row.created_at
    if at is not None and at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return ArchivedPart(
        from_seq=row.from_seq, to_seq=row.to_seq, content=row.content, created_at=at
    )


__all__ = ["archive_part", "parts"]
