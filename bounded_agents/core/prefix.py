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
import functools
import hashlib
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from bounded_agents.core.messages import ChatMessage, ChatRole
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


KEPT_JSON = 64
"""JSON forms of messages without tool calls kept between runs (`_json`), by count: 64
messages' text (most of it held by a store's message cache anyway) and their JSON."""

KEPT_JSON_CHARS = 16 * 1024
"""The longest content whose JSON is kept (`_json`): a kept 8 KB tool result still is, while 64
messages of `max_content_bytes` of control characters (each escaped to 6 bytes) no longer pin
over 100 MB in every process (found by review): at most 64 x (16 K characters of up to 4 bytes
+ their JSON, up to 6 bytes each), about 10 MB."""


@functools.lru_cache(maxsize=KEPT_JSON)
def _plain_json(role: ChatRole, content: str, tool_call_id: str | None) -> bytes:
    return (
        ChatMessage.model_construct(role=role, content=content, tool_call_id=tool_call_id)
        .model_dump_json()
        .encode()
    )


def _json(message: ChatMessage) -> bytes:
    """The message's JSON form (`model_dump_json`, encoded). A thread's next turn sends most of
    its window again: the same stored text, in new message objects, so a run's `PromptChain`
    cannot tell. Without tool calls a message's JSON is a pure function of its role, content
    and call id, so it is kept by those (`_plain_json`): a kept window's 8 KB tool result is
    JSON-encoded once, not once every turn it stays in the window. The chain itself cannot be
    kept: the window's first message changes every turn, and each entry digests all before."""
    if message.tool_calls or len(message.content) > KEPT_JSON_CHARS:
        return message.model_dump_json().encode()
    return _plain_json(message.role, message.content, message.tool_call_id)


def forget_kept_json() -> None:
    """Drop every JSON form kept (`_plain_json`). A store's erasure calls it, so an erased
    message's text does not outlive its row here either; all of them, since they are not
    kept by thread (and an erasure is rare)."""
    _plain_json.cache_clear()


def _link(chain: bytes, message: ChatMessage) -> bytes:
    """The next chain entry: `chain` (the entry before, empty for the first) and the message's
    JSON form, digested together."""
    return hashlib.blake2b(chain + _json(message), digest_size=DIGEST_BYTES).digest()


def _text(link: bytes) -> str:
    return base64.urlsafe_b64encode(link).decode("ascii")


def prompt_digest(messages: Sequence[ChatMessage]) -> str:
    """One chained hash per message: entry k digests messages 1..k (their JSON form)."""
    chain = b""
    out: list[str] = []
    for m in messages:
        chain = _link(chain, m)
        out.append(_text(chain))
    return "".join(out)


class PromptChain:
    """The digest and token estimates of a run's successive prompts, each message measured once.

    A run's next prompt is its last one plus the tool round: the very same message objects,
    then new ones. Each message's estimate and chain entry are kept, and reused while the next
    prompt's messages are the same objects (`is`: a frozen message is its JSON); from the first
    that is not (a refold, a middleware's copy) on, they are computed again. The results are
    exactly `estimate_message_tokens` and `prompt_digest` of each prompt: the journal and the
    stored digest do not change, only the work (an 8 KB tool result is JSON-encoded and hashed
    once a run instead of once a model call)."""

    def __init__(self) -> None:
        self._messages: list[ChatMessage] = []
        self._costs: list[int] = []
        self._links: list[tuple[bytes, str]] = []

    def measure(self, messages: Sequence[ChatMessage]) -> tuple[list[int], str]:
        """(each message's `estimate_message_tokens`, the prompt's `prompt_digest`)."""
        same, limit = 0, min(len(messages), len(self._messages))
        while same < limit and messages[same] is self._messages[same]:
            same += 1
        costs, links = self._costs[:same], self._links[:same]
        chain = links[-1][0] if links else b""
        for m in messages[same:]:
            costs.append(estimate_message_tokens(m))
            chain = _link(chain, m)
            links.append((chain, _text(chain)))
        self._messages, self._costs, self._links = list(messages), costs, links
        return costs, "".join(text for _, text in links)


def prefix_reuse(previous: str | None, digest: str, costs: Sequence[int]) -> PrefixReuse:
    """How much of a prompt repeats the prompt `previous` is the digest of: `digest` is the
    prompt's own (`prompt_digest`), `costs` its messages' token estimates."""
    if previous is None:
        return PrefixReuse()
    same = 0
    limit = min(len(previous), len(digest))
    while same < limit and (
        previous[same : same + DIGEST_CHARS] == digest[same : same + DIGEST_CHARS]
    ):
        same += DIGEST_CHARS
    reused = same // DIGEST_CHARS
    return PrefixReuse(
        messages=reused,
        tokens=sum(costs[:reused]),
        previous_messages=len(previous) // DIGEST_CHARS,
    )


__all__ = [
    "DIGEST_CHARS",
    "PrefixReuse",
    "PromptChain",
    "forget_kept_json",
    "prefix_reuse",
    "prompt_digest",
]
