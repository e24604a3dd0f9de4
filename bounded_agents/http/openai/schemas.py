"""Bodies of the OpenAI-compatible API (`bounded_agents.http.openai.api`), in the shapes the
official `openai` SDK parses (`openai.types.responses`, `openai.types.conversations`).

Only what the API can honour is accepted: a request naming a parameter this server would
have to ignore to answer (its own `instructions`, client-side `tools`, sampling settings) is
refused with a 400 naming that parameter, instead of being answered as if it were obeyed.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, field_validator
from pydantic_core import PydanticCustomError

from bounded_agents.errors import clipped, echoed

# --- requests ------------------------------------------------------------------------------


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputText(_In):
    type: Literal["input_text"]
    text: StrictStr


class InputMessage(_In):
    """A message item of `input` (the SDK's `EasyInputMessageParam` and `Message` param)."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    """Only `user` is accepted: the agent's system prompt and its answers are its own."""
    content: StrictStr | list[InputText]
    status: str | None = None


class ConversationRef(_In):
    id: StrictStr


class CreateConversationIn(_In):
    items: list[dict[str, Any]] | None = None
    """Refused unless empty: a conversation's items are only ever written by its turns."""
    metadata: dict[str, StrictStr] | None = None
    """`agent` names the agent that answers; `title` labels the thread. Nothing else is kept."""
    model: StrictStr | None = None
    """Not in the OpenAI API (pass it with the SDK's `extra_body`): the agent, like `model` of a
    response. `metadata["agent"]` wins."""


UNSUPPORTED_PARAMETERS: tuple[str, ...] = (
    "instructions",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "top_logprobs",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "reasoning",
    "text",
    "truncation",
    "parallel_tool_calls",
    "prompt",
    "background",
)
"""Parameters of `responses.create` this server cannot honour: refused when set (not null)."""


ONLY_TEXT_INPUT: Final = (
    "input is a string or one message with role 'user' whose content is a string or "
    "input_text parts"
)


def refuse_unsupported_input(value: object) -> None:
    """Refuse, naming the item or part (`input[0].content[1]`), an `input` this API cannot
    take: an item other than a message (`function_call_output`: the agent's tools run on the
    server, and a client's `tools` are refused, so there is no call of the client's to answer),
    a part other than `input_text` (`input_image`, `input_file`: the agents take text), or a
    part, content or item that is not what the schema says.

    Run before the schema's own check: that one tries each form `input` may take (a string, a
    list of messages; a message's content a string, a list of parts) and reported the first
    form's failure, `input.str: Input should be a valid string`, naming no parameter of the
    request. Raised as a `PydanticCustomError` whose type is the `/v1` error code and whose
    context holds the `param` (`bounded_agents.http.openai.errors.validation_error`)."""
    if isinstance(value, str):
        return
    if not isinstance(value, list):
        _refuse("invalid_parameter", "input", ONLY_TEXT_INPUT)
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            _refuse("invalid_parameter", where, f"an input item is an object: {ONLY_TEXT_INPUT}")
        kind = item.get("type", "message")
        if kind != "message":
            _refuse(
                "unsupported_parameter",
                where,
                f"input items of type {_shown(kind)} are not supported: {ONLY_TEXT_INPUT} "
                "(the agent's tools run on the server, and its history is the server's)",
            )
        _refuse_unknown_keys(item, InputMessage, where)
        content = item.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            _refuse(
                "invalid_parameter",
                f"{where}.content",
                "a message's content is a string or a list of input_text parts",
            )
        for j, part in enumerate(content):
            _refuse_unsupported_part(part, f"{where}.content[{j}]")


def _refuse_unsupported_part(part: object, where: str) -> None:
    if not isinstance(part, dict):
        _refuse(
            "invalid_parameter", where, 'a content part is an object: {"type": "input_text", ...}'
        )
    kind = part.get("type")
    if kind != "input_text":
        _refuse(
            "unsupported_parameter",
            where,
            f"content parts of type {_shown(kind)} are not supported: only input_text (the "
            "agents here read text; no images, files or audio)",
        )
    _refuse_unknown_keys(part, InputText, where)
    if not isinstance(part.get("text"), str):
        _refuse("invalid_parameter", f"{where}.text", "an input_text part needs its text, a string")


def _refuse_unknown_keys(value: dict[Any, Any], model: type[BaseModel], where: str) -> None:
    unknown = sorted(str(key) for key in value if key not in model.model_fields)
    if unknown:
        param = f"{where}.{clipped(unknown[0])}"
        _refuse("unknown_parameter", param, f"Unknown parameter: {param!r}.")


def _shown(kind: object) -> str:
    return echoed(kind) if isinstance(kind, str) else type(kind).__name__


def _refuse(code: str, param: str, message: str) -> NoReturn:
    raise PydanticCustomError(code, message, {"param": param})


class CreateResponseIn(_In):
    model: StrictStr | None = None
    """The agent's name. May be left out when `conversation` or `previous_response_id` names
    the thread (its agent answers); must match that agent when given."""
    input: StrictStr | list[InputMessage]
    """The user's message: a string, or one `user` message item (its `input_text` parts are
    joined with newlines)."""

    @field_validator("input", mode="before")
    @classmethod
    def _only_text_input(cls, value: object) -> object:
        refuse_unsupported_input(value)
        return value

    conversation: StrictStr | ConversationRef | None = None
    """The thread (its id, or `{"id": ...}`) the turn runs in."""
    previous_response_id: StrictStr | None = None
    """Without `conversation`: continue the thread of that response (run)."""
    stream: StrictBool | None = None
    store: StrictBool | None = None
    """Every turn is stored; `false` is refused."""
    # Accepted and ignored: they change nothing about the answer.
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    service_tier: str | None = None
    stream_options: dict[str, Any] | None = None
    include: list[str] | None = None
    # Refused when set (see UNSUPPORTED_PARAMETERS).
    instructions: Any = None
    tools: Any = None
    tool_choice: Any = None
    temperature: Any = None
    top_p: Any = None
    top_logprobs: Any = None
    max_output_tokens: Any = None
    max_tool_calls: Any = None
    metadata: Any = None
    reasoning: Any = None
    text: Any = None
    truncation: Any = None
    parallel_tool_calls: Any = None
    prompt: Any = None
    background: Any = None


# --- items ---------------------------------------------------------------------------------


class TextPart(BaseModel):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None
    """`[]` on `output_text` parts (the SDK's `ResponseOutputText` requires the list)."""


class MessageItem(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system"]
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    content: list[TextPart]


class FunctionCallItem(BaseModel):
    id: str
    type: Literal["function_call"] = "function_call"
    call_id: str
    name: str
    arguments: str
    """JSON text, as the SDK's `ResponseFunctionToolCall` has it."""
    status: Literal["in_progress", "completed", "incomplete"] = "completed"


class FunctionCallOutputItem(BaseModel):
    id: str
    type: Literal["function_call_output"] = "function_call_output"
    call_id: str
    output: str
    status: Literal["in_progress", "completed", "incomplete"] = "completed"


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem


# --- conversations -------------------------------------------------------------------------


class ConversationOut(BaseModel):
    id: str
    """The thread's id."""
    object: Literal["conversation"] = "conversation"
    created_at: int
    metadata: dict[str, str]
    """`agent`, and `title` when the thread has one."""


class ItemsPage(BaseModel):
    object: Literal["list"] = "list"
    data: list[Item]
    first_id: str | None
    last_id: str | None
    """Pass as `after` for the next page (the SDK's auto-paging does)."""
    has_more: bool


# --- responses -----------------------------------------------------------------------------


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class UsageOut(BaseModel):
    """Every model call the run made (answer steps and any history summary), as booked in
    the ledger."""

    input_tokens: int
    input_tokens_details: InputTokensDetails = InputTokensDetails()
    output_tokens: int
    output_tokens_details: OutputTokensDetails = OutputTokensDetails()
    total_tokens: int


class ResponseErrorOut(BaseModel):
    code: str
    """`rate_limit_exceeded` or `server_error`, the values the SDK knows."""
    message: str
    type: str
    """This project's stable error code (`provider_timeout`, ...)."""


class ConversationIdOut(BaseModel):
    id: str


class FunctionToolOut(BaseModel):
    type: Literal["function"] = "function"
    name: str
    description: str
    parameters: dict[str, Any]
    strict: bool = False


class ResponseOut(BaseModel):
    id: str
    """The run's id: `GET /runs/{id}` reports the same run."""
    object: Literal["response"] = "response"
    created_at: float
    status: Literal["in_progress", "completed", "failed"]
    model: str
    """The agent's name."""
    output: list[Item]
    usage: UsageOut | None = None
    conversation: ConversationIdOut
    previous_response_id: str | None = None
    error: ResponseErrorOut | None = None
    incomplete_details: None = None
    instructions: None = None
    metadata: dict[str, str] = {}
    tools: list[FunctionToolOut] = []
    """The agent's own tools, which it calls server-side."""
    tool_choice: Literal["auto"] = "auto"
    parallel_tool_calls: bool = False
    temperature: float | None = None
    top_p: float | None = None
    store: bool = True


class ModelOut(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "bounded-agents"


class ModelsOut(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelOut]


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    """`invalid_request_error` (4xx), `insufficient_quota` (429) or `server_error` (5xx)."""
    param: str | None
    code: str
    """This project's stable error code (`thread_not_found`, `thread_busy`, ...)."""


class OpenAIErrorOut(BaseModel):
    """Every error of the `/v1` API."""

    error: OpenAIErrorDetail
    response_id: str | None = None
    """Set when a turn started and failed: `responses.retrieve` shows what it did."""
