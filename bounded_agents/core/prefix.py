"""Prompt prefixes: how much of a model call's prompt repeats the previous call's in its thread.

Providers serve a repeated prompt PREFIX from a cache (OpenAI, Anthropic, DeepSeek, vLLM,
llama.cpp), cheaper and faster than new input. Whether a call can hit it depends only on how
many leading messages equal the previous call's, so that is what is measured, and what a
thread remembers between runs is just enough to measure it: a DIGEST of its last prompt, one
chained hash per message (`DIGEST_CHARS` characters each). Chaining makes entry k a digest of
the whole prefix 1..k, so the reused prefix is the run of equal leading entries, and a thread's
memory of a 40-message prompt is 320 characters instead of the prompt.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.tokens import estimate_message_tokens

DIGEST_BYTES = 6
"""48 bits per message: two different prefixes look equal about once in 2**48 comparisons."""
DIGEST_CHARS = 8
"""Characters per message in a digest (`DIGEST_BYTES` in unpadded base64)."""


class PrefixReuse(BaseModel):
    """What one call's prompt shares with the previous call's, from the start."""

    model_config = ConfigDict(frozen=True)

    messages: int = 0
    """Leading messages equal to the previous prompt's."""
    tokens: int = 0
    """Their estimated tokens (`estimate_message_tokens`)."""
    previous_messages: int | None = None
    """Messages of the previous prompt; None when there was none to compare with."""

    @property
    def extends(self) -> bool:
        """The whole previous prompt is a prefix of this one: a cache can serve all of it."""
        return self.previous_messages is not None and self.messages == self.previous_messages


def prompt_digest(messages: Sequence[ChatMessage]) -> str:
    """One chained hash per message: entry k digests messages 1..k (their JSON form)."""
    chain = b""
    out: list[str] = []
    for m in messages:
        chain = hashlib.blake2b(
            chain + m.model_dump_json().encode(), digest_size=DIGEST_BYTES
        ).digest()
        out.append(base64.urlsafe_b64encode(chain).decode("ascii"))
    return "".join(out)


def prefix_reuse(
    previous: str | None, messages: Sequence[ChatMessage], costs: Sequence[int] | None = None
) -> tuple[PrefixReuse, str]:
    """How much of `messages` repeats the prompt `previous` is the digest of, and the digest
    of `messages` (what the next call compares with). `costs`: each message's token estimate,
    when the caller has them already (estimating a message encodes its tool calls as JSON)."""
    digest = prompt_digest(messages)
    if previous is None:
        return PrefixReuse(), digest
    same = 0
    limit = min(len(previous), len(digest))
    while same < limit and (
        previous[same : same + DIGEST_CHARS] == digest[same : same + DIGEST_CHARS]
    ):
        same += DIGEST_CHARS
    reused = same // DIGEST_CHARS
    return (
        PrefixReuse(
            messages=reused,
            tokens=sum(
                costs[:reused]
                if costs is not None
                else (estimate_message_tokens(m) for m in messages[:reused])
            ),
            previous_messages=len(previous) // DIGEST_CHARS,
        ),
        digest,
    )


__all__ = ["DIGEST_CHARS", "PrefixReuse", "prefix_reuse", "prompt_digest"]
