"""The inspector: server-rendered pages that show what each turn of a thread sent its model.

    GET  /inspect                          the actor's threads, newest activity first (?page=)
    GET  /inspect/threads/{id}             a thread's timeline: a bar per turn (?before=)
    GET  /inspect/threads/{id}/timeline    the timeline alone: what the page polls while live
    GET  /inspect/runs/{id}                a run's report: model calls, reads, journal, ledger
    GET  /inspect/login, POST /inspect/login, POST /inspect/logout
    GET  /inspect/static/{inspector.js,inspector.css}

Everything is read with JavaScript off; the one script (ours, served from the package) only
re-fetches the timeline while a page is open, so a turn in flight appears and moves. Templates
are Jinja2 with autoescaping on for every value (a message holding `<script>` is shown as text),
and the pages are sent with a Content-Security-Policy that allows no inline script at all.

Who is asking is the module's own actor resolver, exactly as for the API. A browser cannot send
an `Authorization` header when following a link, so `/inspect/login` takes an API key once and
keeps it in an HttpOnly, SameSite=Strict cookie scoped to `/inspect`; each request hands that
key to the same resolver as a bearer header. Another actor's thread or run is a 404, as in the
API. SameSite does not stop a cross-site POST from *setting* a cookie, so login and logout
refuse a form posted from another site (`cross_site`: `Sec-Fetch-Site`, else `Origin`) with a
403.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable, Coroutine, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, PackageLoader, StrictUndefined
from pydantic import BaseModel

from bounded_agents.core.loop import read_bound
from bounded_agents.core.messages import MAX_SEQ, Message
from bounded_agents.core.ports import (
    RunTrace,
    supports_run_timeline,
    supports_thread_listing,
)
from bounded_agents.core.report import RunReport
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.errors import AgentError, RunNotFound, ThreadNotFound
from bounded_agents.http.deps import canonical_uuid
from bounded_agents.http.errors import public_message, status_for, validation_message

if TYPE_CHECKING:
    from bounded_agents.http.auth import Actor
    from bounded_agents.module import AgentModule

COOKIE = "agent_inspector_key"
THREADS_PER_PAGE = 25
RUNS_PER_PAGE = 20
PREVIEW_CHARS = 400
"""Characters of a message shown in the timeline (the run page links to the whole thread)."""
STATIC = {"inspector.js": "text/javascript", "inspector.css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
UNAUTHORIZED_HEADERS = {**SECURITY_HEADERS, "WWW-Authenticate": "Bearer"}
"""A 401 says what the API's 401 says: a bearer key is wanted (the page offers the form)."""

MAX_PAGE = MAX_SEQ // THREADS_PER_PAGE
"""The last page number accepted: its offset still fits any database's integer."""
PageQuery = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page of the thread list.")]
BeforeQuery = Annotated[
    int | None, Query(ge=1, le=MAX_SEQ, description="Only turns whose seq is below this.")
]

_templates = Environment(
    loader=PackageLoader("bounded_agents.http", "templates"),
    autoescape=True,  # every value, in every template: never opt a file out by its extension
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


# --- what a page shows -----------------------------------------------------------------------


class KeptLine(BaseModel):
    """A kept message as the journal recorded it: the prompt's content, without its seq (the
    journal keeps no ids or positions, so a replay does not depend on which read produced it)."""

    role: str
    text: str
    tokens: int
    tools: int


class TurnView(BaseModel):
    """One turn of the timeline: what its model was sent, as counts, tokens and a bar."""

    run_id: str
    status: str
    seq: int
    created_at: datetime | None
    error: str | None
    steps: list[str]
    pruned: bool
    """Its journal was deleted by retention: what it sent is no longer known."""
    kept: int | None
    """Thread messages sent verbatim (None: the journal does not say, e.g. an older run)."""
    summarized: int
    """Messages the summary sent with this turn stands for (`covers_through_seq`)."""
    dropped: int | None
    """Messages of the thread (up to this turn's) neither sent nor summarized."""
    kept_tokens: int | None
    summary_tokens: int
    summary_text: str | None
    summary_made: bool
    kept_lines: list[KeptLine]
    chat_tokens: tuple[int, int]
    summary_call_tokens: tuple[int, int]
    rows_read: int | None
    bytes_read: int | None
    bar: list[tuple[str, float, float]]
    """(segment, x, width) in percent of the widest turn on the page."""
    token_bar: list[tuple[str, float, float]]


def turn_view(trace: RunTrace) -> TurnView:
    """What the journal says this turn sent: `load:thread` holds the kept messages and the
    summary it read; `history:summarize*` the summaries the turn made."""
    report = RunReport.model_validate(trace.report) if trace.report else None
    load = trace.payloads.get("load:thread")
    load = load if isinstance(load, dict) else {}
    keep_raw = load.get("keep")
    kept_messages = (
        [Message.model_validate(m) for m in keep_raw] if isinstance(keep_raw, list) else None
    )
    summary_text: str | None = None
    covers = 0
    made = False
    summary = load.get("summary")
    if isinstance(summary, dict):
        summary_text = str(summary.get("text", ""))
        covers = int(summary.get("covers_through_seq", 0))
    for name in trace.steps:
        made_now = trace.payloads.get(name) if name.startswith("history:summarize") else None
        if isinstance(made_now, dict) and "covers_through_seq" in made_now:
            summary_text = str(made_now.get("text", ""))
            covers = int(made_now["covers_through_seq"])
            made = True
    kept = len(kept_messages) if kept_messages is not None else None
    kept_tokens = (
        sum(estimate_message_tokens(m) for m in kept_messages)
        if kept_messages is not None
        else None
    )
    summary_tokens = (
        estimate_message_tokens(Message(role="system", content=summary_text)) if summary_text else 0
    )
    dropped = max(0, trace.seq - covers - kept) if kept is not None else None
    chat = [0, 0]
    summarize = [0, 0]
    for call in report.model_calls if report else ():
        into = chat if call.purpose == "chat" else summarize
        into[0] += call.prompt_tokens
        into[1] += call.completion_tokens
    error = None
    if trace.error_code is not None:
        error = f"{trace.error_code}: {public_message(trace.error_code, trace.error_message or '')}"
    return TurnView(
        run_id=trace.run_id,
        status=trace.status,
        seq=trace.seq,
        created_at=trace.created_at,
        error=error,
        steps=trace.steps,
        pruned=trace.pruned,
        kept=kept,
        summarized=covers,
        dropped=dropped if kept_messages is not None else None,
        kept_tokens=kept_tokens,
        summary_tokens=summary_tokens,
        summary_text=summary_text,
        summary_made=made,
        kept_lines=[_line(m) for m in kept_messages or ()],
        chat_tokens=(chat[0], chat[1]),
        summary_call_tokens=(summarize[0], summarize[1]),
        rows_read=report.rows_read if report else None,
        bytes_read=report.bytes_read if report else None,
        bar=[],
        token_bar=[],
    )


def _line(message: Message) -> KeptLine:
    text = message.content
    if len(text) > PREVIEW_CHARS:
        text = text[:PREVIEW_CHARS] + f"… ({len(message.content):,} characters)"
    return KeptLine(
        role=message.role,
        text=text,
        tokens=estimate_message_tokens(message),
        tools=len(message.tool_calls) + len(message.tool_results),
    )


def with_bars(turns: list[TurnView], token_budget: int | None) -> list[TurnView]:
    """Lay out each turn's bars against the page's widest turn (messages) and the window's
    token budget (or the page's largest prompt when the policy has no token budget)."""
    widest = max((t.seq for t in turns), default=1) or 1
    tokens_max = token_budget or max(
        ((t.kept_tokens or 0) + t.summary_tokens for t in turns), default=1
    )
    tokens_max = max(tokens_max, 1)
    out = []
    for t in turns:
        segments = [
            ("summarized", t.summarized),
            ("dropped", t.dropped or 0),
            ("kept", t.kept or 0),
        ]
        token_segments = [("summarized", t.summary_tokens), ("kept", t.kept_tokens or 0)]
        out.append(
            t.model_copy(
                update={
                    "bar": _layout(segments, widest),
                    "token_bar": _layout(token_segments, tokens_max),
                }
            )
        )
    return out


def _layout(segments: Iterable[tuple[str, int]], whole: int) -> list[tuple[str, float, float]]:
    x = 0.0
    out = []
    for name, size in segments:
        width = min(100.0 - x, 100.0 * size / whole)
        if width > 0:
            out.append((name, round(x, 3), round(width, 3)))
            x += width
    return out


# --- requests ----------------------------------------------------------------------------


def build_inspector_router(module: AgentModule, prefix: str = "/inspect") -> APIRouter:
    """The inspector's routes, closed over `module`, at `prefix` (`module.router` includes
    them at `/inspect`; a host may build and include its own elsewhere)."""

    class InspectorRoute(APIRoute):
        """A parameter that does not validate (`?page=10**20`) is a page saying so, a 400:
        the inspector answers a browser, and its values never reach the database."""

        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                try:
                    return await handler(request)
                except RequestValidationError as exc:
                    message = validation_message(exc)
                    return render(
                        request, "error.html", 400, status=400, message=message, actor=None
                    )

            return guarded

    router = APIRouter(prefix=prefix, include_in_schema=False, route_class=InspectorRoute)

    def _base(request: Request) -> str:
        """Links and the cookie's path: the app's root path, then the prefix."""
        return str(request.scope.get("root_path", "")) + prefix

    def render(
        request: Request,
        template: str,
        http_status: int = 200,
        *,
        unauthorized: bool = False,
        **values: Any,
    ) -> HTMLResponse:
        html = _templates.get_template(template).render(base=_base(request), **values)
        headers = UNAUTHORIZED_HEADERS if unauthorized else SECURITY_HEADERS
        return HTMLResponse(html, status_code=http_status, headers=headers)

    async def actor_or_login(request: Request) -> Actor | HTMLResponse:
        actor = await _actor(module, request)
        if actor is None:
            return render(request, "login.html", 401, failed=False, actor=None, unauthorized=True)
        return actor

    def failure(request: Request, actor: Actor, error: AgentError) -> HTMLResponse:
        status = status_for(error)
        message = public_message(error.code, str(error))
        return render(request, "error.html", status, status=status, message=message, actor=actor)

    async def threads(request: Request, page: PageQuery = 1) -> Response:
        actor = await actor_or_login(request)
        if isinstance(actor, HTMLResponse):
            return actor
        listing = []
        store = module.store
        if supports_thread_listing(store):
            offset = (page - 1) * THREADS_PER_PAGE
            listing = await store.list_threads(actor.id, limit=THREADS_PER_PAGE + 1, offset=offset)
        return render(
            request,
            "threads.html",
            actor=actor,
            threads=listing[:THREADS_PER_PAGE],
            page_no=page,
            more=len(listing) > THREADS_PER_PAGE,
            listable=supports_thread_listing(store),
        )

    async def timeline_values(actor: Actor, thread_id: str, before: int | None) -> dict[str, Any]:
        canonical = canonical_uuid(thread_id)
        if canonical is None:
            raise ThreadNotFound(thread_id)
        thread = await module.loop.owned_thread(canonical, actor.id)
        definition = module.loop.definition(thread.agent)
        bound = read_bound(definition.policy)
        runtime = module.loop.runtime
        traces: list[RunTrace] = []
        timeline = supports_run_timeline(runtime)
        if supports_run_timeline(runtime):
            traces = await runtime.thread_runs(
                canonical, limit=RUNS_PER_PAGE + 1, before_seq=before
            )
        more = len(traces) > RUNS_PER_PAGE
        traces = traces[:RUNS_PER_PAGE]
        turns = with_bars([turn_view(t) for t in traces], bound.tokens if bound else None)
        return {
            "thread": thread,
            "turns": turns,
            "bound": bound,
            "timeline": timeline,
            "older": traces[-1].seq if more and traces else None,
            "before": before,
            "live": before is None,
            "running": any(t.status == "running" for t in turns),
        }

    async def thread_page(request: Request, thread_id: str, before: BeforeQuery = None) -> Response:
        actor = await actor_or_login(request)
        if isinstance(actor, HTMLResponse):
            return actor
        try:
            values = await timeline_values(actor, thread_id, before)
            preview = await module.loop.preview(values["thread"].id, actor.id, values["thread"])
        except AgentError as exc:
            return failure(request, actor, exc)
        return render(request, "thread.html", actor=actor, preview=preview, **values)

    async def timeline_fragment(
        request: Request, thread_id: str, before: BeforeQuery = None
    ) -> Response:
        actor = await _actor(module, request)
        if actor is None:
            return Response(status_code=401, headers=UNAUTHORIZED_HEADERS)
        try:
            values = await timeline_values(actor, thread_id, before)
        except AgentError as exc:
            return Response(status_code=status_for(exc), headers=SECURITY_HEADERS)
        return render(request, "_timeline.html", **values)

    async def run_page(request: Request, run_id: str) -> Response:
        actor = await actor_or_login(request)
        if isinstance(actor, HTMLResponse):
            return actor
        canonical = canonical_uuid(run_id)
        record = await module.loop.runtime.get_run(canonical) if canonical else None
        if record is None or record.request.actor_id != actor.id:
            return failure(request, actor, RunNotFound(run_id))
        report = (
            RunReport.model_validate(record.report)
            if record.report is not None
            else RunReport(run_id=record.request.run_id)
        )
        purposes: dict[str, list[int]] = {}
        for call in report.model_calls:
            row = purposes.setdefault(call.purpose, [0, 0, 0])
            row[0] += 1
            row[1] += call.prompt_tokens
            row[2] += call.completion_tokens
        error = None
        if record.error_code is not None:
            error = public_message(record.error_code, record.error_message or "")
        return render(
            request,
            "run.html",
            actor=actor,
            record=record,
            report=report,
            purposes=purposes,
            error=error,
        )

    async def login_form(request: Request) -> Response:
        return render(request, "login.html", failed=False, actor=None)

    def refused_cross_site(request: Request) -> HTMLResponse | None:
        if not cross_site(request):
            return None
        message = "a form posted from another site is refused: sign in on this page"
        return render(request, "error.html", 403, status=403, message=message, actor=None)

    async def login(request: Request) -> Response:
        refused = refused_cross_site(request)
        if refused is not None:
            return refused
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        key = (form.get("key") or [""])[0].strip()
        actor = await module.actor_resolver(_with_key(request, key)) if key else None
        if actor is None:
            return render(request, "login.html", 401, failed=True, actor=None, unauthorized=True)
        response = RedirectResponse(_base(request) + "/", status_code=303)
        response.set_cookie(
            COOKIE,
            key,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=_base(request),
        )
        return response

    async def logout(request: Request) -> Response:
        refused = refused_cross_site(request)
        if refused is not None:
            return refused
        response = RedirectResponse(_base(request) + "/login", status_code=303)
        response.delete_cookie(COOKIE, path=_base(request))
        return response

    async def static(name: str) -> Response:
        media = STATIC.get(name)
        if media is None:
            return Response(status_code=404)
        body = (importlib.resources.files("bounded_agents.http") / "static" / name).read_bytes()
        return Response(
            body,
            media_type=media,
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "max-age=300"},
        )

    router.add_api_route("/", threads, methods=["GET"])
    router.add_api_route("/threads/{thread_id}", thread_page, methods=["GET"])
    router.add_api_route("/threads/{thread_id}/timeline", timeline_fragment, methods=["GET"])
    router.add_api_route("/runs/{run_id}", run_page, methods=["GET"])
    router.add_api_route("/login", login_form, methods=["GET"])
    router.add_api_route("/login", login, methods=["POST"])
    router.add_api_route("/logout", logout, methods=["POST"])
    router.add_api_route("/static/{name}", static, methods=["GET"])
    return router


def cross_site(request: Request) -> bool:
    """Whether a form POST came from another site's page: login CSRF, which signs the victim
    in as the attacker (whose threads then collect what the victim types), or logs them out.

    `Sec-Fetch-Site` decides when sent (a page cannot forge it): only `same-origin`, and
    `none` (the user's own action), pass. Else `Origin` must name this host (a browser sends
    it with every cross-site POST, and `null` from a sandboxed or redirected context is
    refused). A request with neither is no browser's (curl, a script): it passes as it
    always did, since login CSRF needs a browser to carry the cookie."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site.lower() not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    host = request.headers.get("host", "")
    return origin == "null" or urlsplit(origin).netloc.lower() != host.lower()


async def _actor(module: AgentModule, request: Request) -> Actor | None:
    """The module's resolver on the request as sent, else on the key the login cookie holds."""
    actor = await module.actor_resolver(request)
    key = request.cookies.get(COOKIE)
    if actor is None and key:
        actor = await module.actor_resolver(_with_key(request, key))
    return actor


def _with_key(request: Request, key: str) -> Request:
    headers = [(k, v) for k, v in request.scope["headers"] if k != b"authorization"]
    headers.append((b"authorization", f"Bearer {key}".encode("latin-1", "replace")))
    return Request({**request.scope, "headers": headers})


__all__ = ["build_inspector_router", "turn_view", "with_bars"]
