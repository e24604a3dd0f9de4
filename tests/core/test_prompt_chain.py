"""`PromptChain` measures a run's successive prompts (token estimates and the chained digest)
exactly as `estimate_message_tokens` and `prompt_digest` do, but each message once while the
next prompt repeats the very same message objects."""

from __future__ import annotations

import base64
import hashlib
import tracemalloc

import pytest

from bounded_agents.core import prefix
from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.prefix import DIGEST_BYTES, PromptChain, prompt_digest
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.settings import Settings
from bounded_agents.store.message_cache import MAX_BYTES


def _prompt() -> list[ChatMessage]:
    call = ToolCall(id="c1", name="read_page", arguments={"url": "https://e.x/1"})
    return [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="user", content="read it"),
        ChatMessage(role="assistant", content="", tool_calls=[call]),
        ChatMessage(role="tool", content="x" * 8000, tool_call_id="c1"),
        ChatMessage(role="user", content="and now?"),
    ]


def _expected(messages: list[ChatMessage]) -> tuple[list[int], str]:
    return [estimate_message_tokens(m) for m in messages], prompt_digest(messages)


def _encoded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The contents of the messages the chain asks to be JSON-encoded from now on (what the
    digest costs), each ask counted: the JSON kept between runs (`prefix._plain_json`, tested
    on its own below) is left out, so what is counted is the chain's own reuse."""
    seen: list[str] = []

    def counted(message: ChatMessage) -> bytes:
        seen.append(message.content)
        return message.model_dump_json().encode()

    monkeypatch.setattr(prefix, "_json", counted)
    return seen


def test_a_growing_prompt_is_measured_as_a_fresh_one_encoding_only_its_new_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prompt = _prompt()
    first, second = prompt[:3], [*prompt[:3], prompt[3], prompt[4]]
    want_first, want_second = _expected(first), _expected(second)
    chain = PromptChain()
    seen = _encoded(monkeypatch)
    assert chain.measure(first) == want_first
    assert chain.measure(second) == want_second
    assert seen == [m.content for m in first] + [prompt[3].content, prompt[4].content], (
        "the three repeated messages were not encoded again"
    )


def test_an_equal_but_new_message_is_measured_again_from_there_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reuse is by identity: a rebuilt prompt (a refold, a middleware's copy) is measured anew
    from its first new object, so a changed message can never keep a stale entry."""
    prompt = _prompt()
    chain = PromptChain()
    chain.measure(prompt)
    changed = [prompt[0], ChatMessage(role="user", content="read that"), *prompt[2:]]
    copied = [prompt[0], prompt[1].model_copy(), *prompt[2:]]
    want_changed, want_copied = _expected(changed), _expected(copied)
    assert want_copied == _expected(prompt)
    seen = _encoded(monkeypatch)
    assert chain.measure(changed) == want_changed
    assert chain.measure(copied) == want_copied
    assert len(seen) == 4 + 4, "each time from the second message on"
    assert chain.measure(prompt[:2]) == _expected(prompt[:2]), "a shorter prompt"


def test_a_message_without_tool_calls_is_encoded_once_across_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The next turn sends the same stored text in new message objects: a message without tool
    calls is encoded once by its role, content and call id (`prefix._plain_json`), one with
    tool calls every time; the digest is that of `model_dump_json` either way."""
    prefix._plain_json.cache_clear()
    seen: list[str] = []
    dump = ChatMessage.model_dump_json

    def counted(self: ChatMessage, **kwargs: object) -> str:
        seen.append(self.content)
        return dump(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ChatMessage, "model_dump_json", counted)
    first, again = _prompt(), _prompt()
    measured = PromptChain().measure(first)
    assert seen == [m.content for m in first]
    seen.clear()
    assert PromptChain().measure(again) == measured
    assert seen == [""], "only the assistant message, which has a tool call"
    monkeypatch.undo()
    chain, digest = b"", ""
    for m in again:
        step = hashlib.blake2b(chain + m.model_dump_json().encode(), digest_size=DIGEST_BYTES)
        chain = step.digest()
        digest += base64.urlsafe_b64encode(chain).decode()
    assert measured[1] == digest
    prefix.forget_kept_json()  # what a store's erasure calls
    assert prefix._plain_json.cache_info().currsize == 0


def test_the_kept_json_covers_every_field_of_a_message_without_tool_calls() -> None:
    """`prefix._plain_json` builds a message's JSON from its role, content and call id alone:
    a field added to `ChatMessage` must be added there too, or two messages that differ in it
    would share one digest. This fails first."""
    assert set(ChatMessage.model_fields) == {"role", "content", "tool_calls", "tool_call_id"}


def test_the_kept_prompt_json_is_bounded_in_bytes_like_the_message_cache() -> None:
    """9b4dfa7: `prefix._plain_json` keeps 64 entries whatever their size, and keeps both the
    content (its lru key) and its JSON. A message may hold `max_content_bytes` (256 KB) of
    control characters, each JSON-escaped to 6 bytes (\\u0001): 64 such messages pin about
    115 MB in every worker process until an erasure clears the cache, twice the byte budget of
    a store's whole message cache (`MessageCache`, 64 MB, which also never keeps a message
    over a quarter of it)."""
    prefix.forget_kept_json()
    size = Settings().max_content_bytes
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(prefix.KEPT_JSON):
            content = f"{i:04d}" + "\x01" * (size - 4)
            prefix.prompt_digest([ChatMessage(role="user", content=content)])
            del content
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        prefix.forget_kept_json()
    assert kept <= MAX_BYTES, f"{kept / 2**20:.0f} MiB kept by the prompt JSON cache"
