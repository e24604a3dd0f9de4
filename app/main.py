"""The runnable app: `uvicorn app.main:app` (or `python -m app serve`, or `make run`).

SQLite at `./agent.db` migrated at start-up, the offline `EchoModel`, and one agent,
`assistant`, whose `read_page` tool returns ~20 KB: a few calls and the thread is far bigger
than what a turn needs, which is what the history window (20 messages unless `AGENT_HISTORY_*`
says otherwise) and `GET /threads/{id}/window` are there to show.

`import app.main` has no side effects: `app` is built on first access (module `__getattr__`),
which is what uvicorn does when it loads `app.main:app`. Tests and hosts call `create_app`.
"""

from __future__ import annotations

import hashlib

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from bounded_agents.core.history import HistoryConfig
from bounded_agents.http import build_openai_router, build_router, install_error_handlers
from bounded_agents.module import AgentModule
from bounded_agents.registry import agent, tool
from bounded_agents.settings import Settings, get_settings

PAGE_BYTES = 20_000
"""Roughly how much text `read_page` returns."""
DEFAULT_HISTORY = HistoryConfig(max_messages=20)


@agent(
    name="assistant",
    system_prompt=(
        "You are a concise assistant. Use read_page to read a web page the user names, "
        "and word_count to count the words of a text."
    ),
)
class AssistantAgent:
    @tool
    async def read_page(self, url: str) -> str:
        """Read the page at `url` and return its text (about 20 KB).

        Offline and deterministic: the text is made up from the url, never fetched.
        """
        return fake_page(url)

    @tool
    async def word_count(self, text: str) -> int:
        """Count the words of `text`."""
        return len(text.split())


def fake_page(url: str, size: int = PAGE_BYTES) -> str:
    """A deterministic page of about `size` characters, different for every url."""
    digest = hashlib.sha256(url.encode()).hexdigest()
    lines = [f"# {url}", ""]
    n = 0
    while sum(len(line) + 1 for line in lines) < size:
        word = digest[n % len(digest) : n % len(digest) + 6]
        lines.append(
            f"Paragraph {n + 1} of {url}: section {word} explains item {n} in plain words, "
            f"with enough detail to make this page long."
        )
        n += 1
    return "\n".join(lines)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The embedded default: `assistant` on the configured store and model."""
    settings = settings or get_settings()
    module = AgentModule.for_root(
        agents=[AssistantAgent],
        history=settings.history_config() or DEFAULT_HISTORY,
        settings=settings,
    )
    app = FastAPIOffline(  # /docs and /redoc load their assets from this server, not a CDN
        title="bounded-agents",
        summary="LLM agents whose conversation history stays bounded.",
        lifespan=module.lifespan,
        swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from swagger.io
    )
    app.state.agent_module = module
    app.include_router(build_router(module))
    app.include_router(build_openai_router(module))
    install_error_handlers(app)
    return app


_app: FastAPI | None = None


def __getattr__(name: str) -> FastAPI:
    """`app.main.app`, built on first access from the environment's settings."""
    global _app
    if name != "app":
        raise AttributeError(f"module 'app.main' has no attribute {name!r}")
    if _app is None:
        _app = create_app()
    return _app
