"""`GET /v1/responses/{response_id}/input_items`: the items the response's model was sent.

A response is a run, and its input is the prompt of the run's last model call, rebuilt from
the run's journal (`sent_prompt`): the agent's system prompt, the thread's summary (a second
`system` message, when the policy summarizes), the kept messages, and the tool calls and
results the run fed back, in the order sent. Each chat message becomes items as the OpenAI API
would list it: a message (`input_text` parts; an assistant's are `output_text`), an assistant's
tool calls as `function_call` items, each result as a `function_call_output`.

Item ids are the run's id and the item's index in that list (`msg_<run>_<i>`, `fc_<run>_<i>`,
`fco_<run>_<i>`): the journal of a finished run does not change, so an id names one item on
every call and `after` pages through it. Only the response's actor sees them (404 otherwise).
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from fastapi import Query

from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import RunRecord
from bounded_agents.errors import JournalPruned, RunNotFound, echoed
from bounded_agents.http.deps import ActorDep, ModuleDep, canonical_uuid
from bounded_agents.http.openai.errors import InvalidParameter, UnsupportedParameter
from bounded_agents.http.openai.responses import ResponseIdPath
from bounded_agents.http.openai.schemas import (
    FunctionCallItem,
    FunctionCallOutputItem,
    Item,
    ItemsPage,
    MessageItem,
    TextPart,
)
from bounded_agents.http.sent_prompt import sent_prompt
from bounded_agents.module import AgentModule
from bounded_agents.outcome import run_messages


def input_items_path(response_id: str) -> str:
    """Where a response's input items are listed (the native `GET /runs/{id}` links it)."""
    return f"/v1/responses/{response_id}/input_items"


async def list_input_items(
    response_id: ResponseIdPath,
    actor: ActorDep,
    module: ModuleDep,
    limit: Annotated[int, Query(ge=1, le=100, description="Items per page.")] = 20,
    after: Annotated[
        str | None, Query(description="An item id of this response: list from after it.")
    ] = None,
    order: Annotated[
        Literal["asc", "desc"], Query(description="`asc`: in the order sent; `desc`: reversed.")
    ] = "desc",
    include: Annotated[list[str] | None, Query(description="Accepted, ignored.")] = None,
) -> ItemsPage:
    """Newest first by default, as OpenAI lists them. `include` names extra fields of output
    items (reasoning, logprobs, image urls) that no item here has, so it changes nothing."""
    canonical = canonical_uuid(response_id)
    record = await module.loop.runtime.get_run(canonical) if canonical else None
    if canonical is None or record is None or record.request.actor_id != actor.id:
        raise RunNotFound(response_id)
    items = prompt_items(canonical, await _sent_prompt(module, canonical, record))
    if order == "desc":
        items.reverse()
    if after is not None:
        index = next((i for i, item in enumerate(items) if item.id == after), None)
        if index is None:
            raise InvalidParameter("after", f"{echoed(after)} is not an item of this response")
        items = items[index + 1 :]
    page = items[:limit]
    return ItemsPage(
        data=page,
        first_id=page[0].id if page else None,
        last_id=page[-1].id if page else None,
        has_more=len(items) > limit,
    )


async def _sent_prompt(module: AgentModule, run_id: str, record: RunRecord) -> list[ChatMessage]:
    """`sent_prompt`, but an ended run whose user message was erased is 410 `journal_pruned`,
    as every other run of its thread is after an erasure (it deletes the thread's journal):
    its input is gone, not a parameter this API cannot serve."""
    try:
        return await sent_prompt(module, run_id, record)
    except UnsupportedParameter:
        if record.status != "running":
            stored = await run_messages(module.store, record.request.thread_id, run_id)
            if not any(m.role == "user" for m in stored):
                raise JournalPruned(run_id) from None
        raise


def prompt_items(run_id: str, prompt: list[ChatMessage]) -> list[Item]:
    """The prompt's messages as items, in the order sent. An assistant message that carried
    tool calls is its text (when it had any), then one `function_call` per call."""
    key = run_id.replace("-", "")
    out: list[Item] = []
    for message in prompt:
        if message.role == "tool":
            out.append(
                FunctionCallOutputItem(
                    id=f"fco_{key}_{len(out)}",
                    call_id=message.tool_call_id or "",
                    output=message.content,
                )
            )
            continue
        if message.content or not message.tool_calls:
            out.append(_message(f"msg_{key}_{len(out)}", message))
        for call in message.tool_calls:
            out.append(
                FunctionCallItem(
                    id=f"fc_{key}_{len(out)}",
                    call_id=call.id,
                    name=call.name,
                    arguments=json.dumps(call.arguments, ensure_ascii=False),
                )
            )
    return out


def _message(item_id: str, message: ChatMessage) -> MessageItem:
    if message.role == "assistant":
        part = TextPart(type="output_text", text=message.content, annotations=[])
        return MessageItem(id=item_id, role="assistant", content=[part])
    role: Literal["user", "system"] = "system" if message.role == "system" else "user"
    part = TextPart(type="input_text", text=message.content)
    return MessageItem(id=item_id, role=role, content=[part])


__all__ = ["input_items_path", "list_input_items", "prompt_items"]
