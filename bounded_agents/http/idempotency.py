"""The `Idempotency-Key` header of the turn routes (`POST .../messages`, `POST /v1/responses`).

A client (or an SDK, or a proxy) that retries a turn after a timeout sends the same key, and is
answered with the first turn's answer instead of paying for a second one. The key is checked
here (printable ASCII, 1 to 255 characters, as Stripe bounds it; a bad one is the route's 422
or 400); the request it came with is fingerprinted, so the same key with another request is
refused (422 `idempotency_key_reused`) rather than answered with an unrelated turn.
docs/reliability.md ("Idempotency keys") says what a retry gets.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, Final

from fastapi import Header

from bounded_agents.core.ports import IDEMPOTENCY_KEY_CHARS, Idempotency

KEY_PATTERN: Final = r"^[\x20-\x7e]+$"
"""Printable ASCII: what any client can send in a header and read back in a log."""

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=IDEMPOTENCY_KEY_CHARS,
        pattern=KEY_PATTERN,
        description="Makes the turn safe to retry: a repeat with the same key (same actor, same "
        "thread, same body) is answered with the first turn's answer (409 `turn_in_progress` "
        "while it still runs) and never calls the model again; the same key with another body "
        "is 422 `idempotency_key_reused`. Printable ASCII, at most 255 characters.",
    ),
]

_THREADS_NAMESPACE: Final = uuid.UUID("6f0c1b2e-5d4a-4e8b-9a61-2f3d7c8e9b10")
"""Of the thread ids named after an actor and a key (`keyed_thread_id`)."""


def idempotency(
    key: str | None, route: str, body: Mapping[str, Any], secret: bytes
) -> Idempotency | None:
    """The key and the fingerprint of the request it came with (None without a key): an
    HMAC-SHA256 under `secret` (`Settings.fingerprint_secret`) of the route and the body's
    fields as validated, so the same request sent with other whitespace or key order is the
    same request. Keyed, because the fingerprint outlives an erasure of the content: a plain
    digest would let anyone holding the database confirm a guessed content offline."""
    if key is None:
        return None
    canonical = json.dumps({"route": route, "body": body}, sort_keys=True, separators=(",", ":"))
    digest = hmac.new(secret, canonical.encode(), hashlib.sha256).hexdigest()
    return Idempotency(key=key, fingerprint=digest)


def keyed_thread_id(actor_id: str, key: str) -> str:
    """The id of the thread a keyed request that starts a new thread creates: the same for the
    same actor and key, so a retry finds that thread (and the key's run in it) instead of
    starting a second one; another actor's same key names another thread."""
    return str(uuid.uuid5(_THREADS_NAMESPACE, f"{actor_id}\n{key}"))
