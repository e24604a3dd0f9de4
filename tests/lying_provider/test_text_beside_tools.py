"""Text a model says beside its tool calls ("Let me check the pricing page first.") is shown
to the SSE client as it streams; the stored answer keeps it too, so the transcript, /v1 and
every later prompt hold what the user saw (attack round 6: only the last step's text was
stored). Streamed and not, both databases."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx
import pytest

from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ModuleFactory, new_thread, transcript
from tests.lying_provider.helpers import app_client, provider, sse_turn, wire_call
from tests.providers.fake_openai import FakeOpenAI, Reply, chunk, completion, usage_chunk


@pytest.mark.parametrize("stream", [False, True])
async def test_text_the_model_said_beside_its_tool_calls_is_stored(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
    stream: bool,
) -> None:
    """Step 1 says something AND asks for a tool; step 2 answers. The SSE client was shown
    both texts; the stored message (and so every later prompt, the transcript, /v1) should
    hold what the model said, not only its last step."""
    first, last = "Let me check the pricing page first.", "It costs $5."
    if stream:
        fake_openai.enqueue(
            Reply.sse(
                [
                    chunk({"content": first}),
                    chunk(
                        {
                            "tool_calls": [
                                wire_call(
                                    0,
                                    id="c1",
                                    function={"name": "read_page", "arguments": '{"url": "p"}'},
                                )
                            ]
                        },
                        finish_reason="tool_calls",
                    ),
                    usage_chunk(11, 7),
                ]
            ),
            Reply.sse([chunk({"content": last}, finish_reason="stop"), usage_chunk(11, 7)]),
        )
    else:
        fake_openai.enqueue(
            Reply.json(
                completion(
                    first,
                    [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "read_page", "arguments": '{"url": "p"}'},
                        }
                    ],
                )
            ),
            Reply.json(completion(last)),
        )
    client = await app_client(stack, make_module, provider(fake_openai, http_client))
    tid = await new_thread(client)
    events = await sse_turn(client, tid, "price?")
    shown = "".join(d["text"] for e, d in events if e == "delta")
    assert first in shown and last in shown
    stored = (await transcript(client, tid))[1]["content"]
    assert first in stored, f"SSE showed {shown!r}; stored {stored!r}"
    assert stored == shown  # all of it, in the order it was shown
