"""`@agent` and `@tool`: decorators that only record, and the tool bindings built from them.

A decorator does no I/O and builds nothing heavy: `@agent` stores an `AgentSpec` on the class,
`@tool` marks the method. `AgentModule.for_root` reads them when it builds the module, so
importing an agent class has no side effects.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from bounded_agents.core.context_window import ChatMiddleware
from bounded_agents.core.history import HistorySpec
from bounded_agents.core.messages import ToolResult
from bounded_agents.core.ports import AgentStore, ToolSpec
from bounded_agents.core.search import SEARCH_TOOL_NAME, HistorySearchTool
from bounded_agents.core.turn.public import ToolBinding
from bounded_agents.errors import ConfigError

C = TypeVar("C", bound=type)
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_AGENT_ATTR = "__agent_spec__"
_TOOL_ATTR = "__tool_name__"


@dataclass(frozen=True)
class AgentSpec:
    """What `@agent(...)` recorded about a class."""

    name: str
    system_prompt: str
    history: HistorySpec | None = None
    max_steps: int = 8
    chat_middleware: Sequence[ChatMiddleware] = field(default_factory=tuple)
    search: bool = False
    """Whether the agent gets the `search_history` tool (`bounded_agents.core.search`)."""


def agent(
    *,
    name: str,
    system_prompt: str = "You are a helpful assistant.",
    history: HistorySpec | None = None,
    max_steps: int = 8,
    chat_middleware: Sequence[ChatMiddleware] = (),
    search: bool = False,
) -> Callable[[C], C]:
    """Declare a class as an agent. `history=` (a HistoryConfig, a dict or a HistoryPolicy)
    outranks everything set module-wide, for this agent only; `chat_middleware` runs after
    the module's. `search=True` adds the built-in `search_history` tool: the model can look up
    messages of its thread that its bounded prompt no longer holds (`bounded_agents.core.search`
    says what it returns and its bounds). The class must be constructible without arguments."""
    if max_steps < 1:
        raise ConfigError(f"agent {name!r}: max_steps must be at least 1, got {max_steps}")

    def register(cls: C) -> C:
        setattr(
            cls,
            _AGENT_ATTR,
            AgentSpec(name, system_prompt, history, max_steps, tuple(chat_middleware), search),
        )
        return cls

    return register


@overload
def tool(fn: F, /) -> F: ...
@overload
def tool(*, name: str | None = None) -> Callable[[F], F]: ...
def tool(fn: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Mark an async method as a tool. Its JSON schema comes from the type hints, its
    description from the docstring. Returns the function unchanged."""

    def mark(f: F) -> F:
        probe: Callable[..., Any] = f  # the TypeGuard would otherwise narrow `f` away from F
        if not inspect.iscoroutinefunction(probe):
            raise ConfigError(f"@tool {f.__qualname__} must be an async function")
        setattr(f, _TOOL_ATTR, name or f.__name__)
        return f

    if fn is not None:
        return mark(fn)
    return mark


def agent_spec(cls: type) -> AgentSpec:
    spec = getattr(cls, _AGENT_ATTR, None)
    if not isinstance(spec, AgentSpec):
        raise ConfigError(f"{cls.__qualname__} is not decorated with @agent(...)")
    return spec


class MethodTool:
    """A `ToolBinding` over a bound `@tool` method, validating arguments with pydantic."""

    def __init__(self, name: str, method: Callable[..., Awaitable[Any]]) -> None:
        self._method = method
        self._args_model = _arguments_model(name, method)
        doc = inspect.getdoc(method) or ""
        self._spec = ToolSpec(
            name=name,
            description=doc.split("\n\n")[0].strip(),
            parameters=self._args_model.model_json_schema(),
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        try:
            args = self._args_model.model_validate(arguments)
        except ValidationError as exc:
            errors = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            return ToolResult(call_id="", content=f"invalid arguments: {errors}", is_error=True)
        try:
            value = await self._method(**{k: getattr(args, k) for k in type(args).model_fields})
        except Exception as exc:
            return ToolResult(call_id="", content=_failure(exc), is_error=True)
        if isinstance(value, str):
            return ToolResult(call_id="", content=value)
        try:
            return ToolResult(call_id="", content=_json(value))
        except (TypeError, ValueError, RecursionError) as exc:
            # Tuple keys, a circular dict, an int past Python's 4,300 digits: the model reads
            # why, as for a tool that raised (found by attack: the turn was a 500).
            text = f"the tool's return value cannot be sent as JSON: {_failure(exc)}"
            return ToolResult(call_id="", content=text, is_error=True)


def _failure(exc: BaseException) -> str:
    """`Type: message` of a tool's exception; an exception whose `str()` itself raises is
    named by its type alone (found by attack: it was a 500)."""
    try:
        text = str(exc)
    except Exception:
        return type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _json(value: Any) -> str:
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, default=str, ensure_ascii=False)


def _arguments_model(name: str, method: Callable[..., Any]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    hints = inspect.get_annotations(method, eval_str=True)
    for param in inspect.signature(method).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigError(f"@tool {name}: *args/**kwargs cannot be described to a model")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def tool_bindings(
    instance: object, *, search_store: AgentStore | None = None
) -> dict[str, ToolBinding]:
    """The `@tool` methods of an agent instance, bound, by tool name; with `search_store` (an
    agent declared with `search=True`) the `search_history` tool over it too."""
    out: dict[str, ToolBinding] = {}
    if search_store is not None:
        out[SEARCH_TOOL_NAME] = HistorySearchTool(search_store)
    for attr in dir(type(instance)):
        fn = getattr(type(instance), attr, None)
        tool_name = getattr(fn, _TOOL_ATTR, None)
        if isinstance(tool_name, str):
            if tool_name in out:
                what = (
                    "the built-in search tool and a tool"
                    if tool_name == SEARCH_TOOL_NAME
                    else "two tools"
                )
                raise ConfigError(f"{what} named {tool_name!r} on {type(instance).__qualname__}")
            out[tool_name] = MethodTool(tool_name, getattr(instance, attr))
    return out
