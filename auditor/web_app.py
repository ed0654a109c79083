"""`auditor serve`: the store in a browser, for one person on their own machine.

Built on Starlette (served by uvicorn) rather than as a Datasette plugin: Datasette reads
SQLite files only, and a store may be PostgreSQL; and the pages here are the ones auditor
already renders (the thread page of `export html`, the search of `auditor search`, the
verdicts with cost and delivery of `auditor show`), not tables of rows. Everything is
rendered on the server from the Jinja2 templates `export html` uses, with autoescaping, and
redacted; the pages run no script.

Pages: `/` the threads, with full-text search and filters (agent, project, since); `/threads/ID`
one thread with its signals and verdicts in place; `/corrections` every correction an observer
asked for, with its cost and delivery; `/review` the same corrections to mark right or wrong,
kept as labels in the store (`auditor.store.labels`), which `auditor eval` and
`report verdicts` read.

Marking is the one thing that writes, through a form POST. Two guards keep another web page
the person has open from doing it for them, or from reading the store through a name that
points at 127.0.0.1: each form carries a token made when the server starts (kept in memory
only), and the server answers only requests addressed to the host it listens on.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from typing import Any
from urllib.parse import parse_qs, urlencode

from sqlalchemy import Engine

from .errors import AuditorError

MAX_THREADS = 500  # rows on the threads page; the filters narrow it
MAX_HITS = 200  # messages the search shows
SAID = 1500  # characters of the agent's last message shown beside a correction to review
MARKS = {"right": True, "wrong": False, "clear": None}
LOOPBACK = ("127.0.0.1", "localhost", "::1")
TITLES = {
    "serve_threads.html": "threads · auditor",
    "serve_corrections.html": "corrections · auditor",
    "serve_review.html": "review · auditor",
    "serve_error.html": "not found · auditor",
}


class MissingServer(AuditorError):
    """Starlette or uvicorn is not installed."""


def require_server() -> None:
    """Fail with the command that installs the web server when it is missing."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingServer(
            f"auditor serve needs {exc.name}: pip install 'auditor[serve]'"
        ) from None


def make_app(engine: Engine, plugins, *, hosts: list[str] | None = None, token: str | None = None):
    """The Starlette application over `engine`. `hosts`: the Host names it answers (None: any);
    `token`: what each form must carry back (made here when not given)."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import Route

    from .redact import shown
    from .reports import html_export as pages

    token = token or secrets.token_urlsafe(24)
    clean = shown(True)

    def page(template: str, status_code: int = 200, **values: Any) -> HTMLResponse:
        title = TITLES.get(template, "auditor")
        return HTMLResponse(
            pages.render_page(template, token=token, title=title, **values),
            status_code=status_code,
        )

    async def threads(request: Request) -> Response:
        from .store.threads import list_threads

        form = _filters(request.query_params)
        try:
            since = _since(form["since"])
        except AuditorError as exc:
            return page(
                "serve_threads.html",
                400,
                form=form,
                agents=[],
                error=str(exc),
                rows=[],
                hits=None,
                more=0,
            )
        rows = list_threads(
            engine,
            agent=form["agent"] or None,
            project=form["project"] or None,
            since=since,
            limit=None if form["q"] else MAX_THREADS,
        )
        hits = None
        if form["q"]:
            rows, hits = _searched(engine, form, since, rows, clean)
        agents = sorted({r["agent"] for r in list_threads(engine)})
        return page(
            "serve_threads.html",
            form=form,
            agents=agents,
            error=None,
            hits=hits,
            rows=[_thread_line(r, clean) for r in rows[:MAX_THREADS]],
            more=max(0, len(rows) - MAX_THREADS),
        )

    async def thread(request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        rows = pages.thread_rows(engine, [thread_id])
        if not rows:
            raise HTTPException(404, f"no thread {thread_id} in this store")
        row = rows[0]
        chart = pages.usage_chart(engine, thread_id, {"audit": row["audit_usd"] or 0.0})
        return HTMLResponse(
            pages.thread_page(engine, plugins, row, chart, clean, home="/", review="/review")
        )

    async def corrections(request: Request) -> Response:
        from .store.labels import corrections_with_labels

        return page(
            "serve_corrections.html",
            rows=[_correction(r, clean) for r in corrections_with_labels(engine)],
        )

    async def review(request: Request) -> Response:
        from .store.labels import corrections_with_labels

        rows = [_correction(r, clean) for r in corrections_with_labels(engine)]
        todo = [r for r in rows if r["label"] is None]
        done = [r for r in rows if r["label"] is not None]
        return page("serve_review.html", todo=todo, done=done, total=len(rows))

    async def mark(request: Request) -> Response:
        from .store.labels import mark as store_mark

        fields = {k: v[-1] for k, v in parse_qs((await request.body()).decode()).items()}
        if not secrets.compare_digest(fields.get("token", ""), token):
            raise HTTPException(403, "this form is from another server: reload the page")
        if fields.get("mark") not in MARKS:
            raise HTTPException(400, "mark must be right, wrong or clear")
        try:
            store_mark(engine, request.path_params["verdict_id"], MARKS[fields["mark"]])
        except AuditorError as exc:
            raise HTTPException(404, str(exc)) from None
        back = fields.get("back", "/review")
        if not back.startswith("/") or back.startswith("//"):
            back = "/review"
        return RedirectResponse(back, status_code=303)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return page("serve_error.html", exc.status_code, status=exc.status_code, why=exc.detail)

    async def headers(request: Request, call_next):
        response = await call_next(request)
        # No script, nothing from elsewhere, not framed: the pages are text and forms.
        response.headers["Content-Security-Policy"] = (
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        )
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    from starlette.middleware.base import BaseHTTPMiddleware

    middleware = [Middleware(BaseHTTPMiddleware, dispatch=headers)]
    if hosts is not None:
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=hosts))
    return Starlette(
        routes=[
            Route("/", threads),
            Route("/threads/{thread_id:int}", thread),
            Route("/corrections", corrections),
            Route("/review", review),
            Route("/review/{verdict_id:int}", mark, methods=["POST"]),
        ],
        middleware=middleware,
        exception_handlers={HTTPException: http_error},
    )


def _filters(params) -> dict[str, str]:
    return {k: (params.get(k) or "").strip() for k in ("q", "agent", "project", "since")}


def _since(value: str):
    from .durations import parse_since

    return parse_since(value) if value else None


def _searched(engine: Engine, form: dict[str, str], since, rows: list[dict], clean):
    """The threads of `rows` holding every word of the query, in the order of their newest
    matching message, and the matches (redacted snippets) by thread."""
    from .store.search import search, snippet

    found = search(
        engine,
        form["q"],
        agent=form["agent"] or None,
        project=form["project"] or None,
        since=since,
        limit=MAX_HITS,
    )
    words = form["q"].split()
    hits: dict[int, list[dict[str, str]]] = defaultdict(list)
    order: list[int] = []
    for h in found:
        if h["thread_id"] not in hits:
            order.append(h["thread_id"])
        hits[h["thread_id"]].append(
            {
                "anchor": f"m-{h['message_native_id']}",
                "role": h["role"],
                "time": (h["time"] or "")[:16].replace("T", " "),
                "text": snippet(clean(h["body"]), words),
            }
        )
    by_id = {r["id"]: r for r in rows}
    return [by_id[i] for i in order if i in by_id], hits


def _thread_line(r: dict[str, Any], clean) -> dict[str, Any]:
    from .reports.html_export import usd_text

    return {
        "id": r["id"],
        "short_id": clean(r["short_id"]),
        "title": clean(r["title"] or r["native_id"])[:120],
        "agent": r["agent"],
        "project": clean(r["cwd"] or ""),
        "started": (r["started"] or "")[:16].replace("T", " "),
        "messages": r["messages"],
        "usd": usd_text(r["agent_usd"]) if r["agent_usd"] is not None else "?",
        "subagent": bool(r["parent"]),
    }


def _correction(v: dict[str, Any], clean) -> dict[str, Any]:
    from .reports.html_export import clip
    from .store.verdict_rows import cost_text, delivery_text

    return {
        "id": v["id"],
        "thread_id": v["thread_id"],
        "thread": clean(v["thread_short_id"]),
        "agent": v["agent"],
        "project": clean(v["cwd"] or ""),
        "at": clean(v["message_id"]),
        "when": (v["created_at"] or "")[:19].replace("T", " "),
        "who": f"{v['observer']} · {v['model']}",
        "cost": cost_text(v),
        "delivery": clean(delivery_text(v) or ""),
        "text": clean(v["message"] or ""),
        "said": clip(clean(v["said"]), SAID),
        "label": v["label"],
        "mark": {True: "right", False: "wrong", None: ""}[v["label"]],
    }


def query_string(form: dict[str, str], **changes: str) -> str:
    """The page's filters as a query string, with `changes`; empty values left out."""
    merged = {**form, **changes}
    return urlencode({k: v for k, v in merged.items() if v})


DEFAULT_PORT = 8420


def listen(host: str, port: int):
    """A socket bound to host:port (port 0: a free one), or an error saying what to do."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise AuditorError(
            f"cannot listen on {host}:{port}: {exc.strerror}; "
            "pass --port N (0 takes a free port) or another --host"
        ) from None
    sock.listen(64)
    return sock


def serve(engine: Engine, plugins, host: str, port: int, announce) -> None:
    """Serve the store until interrupted; `announce` gets the address, once listening."""
    require_server()
    import uvicorn

    sock = listen(host, port)
    bound = sock.getsockname()[1]
    # On 127.0.0.1 the server answers requests for its own address only, so that a name of
    # someone else's that resolves to 127.0.0.1 cannot reach it from their page.
    hosts = ["127.0.0.1", "localhost"] if host in ("127.0.0.1", "localhost") else None
    app = make_app(engine, plugins, hosts=hosts)
    shown = f"[{host}]" if ":" in host else host
    announce(f"auditor serve: http://{shown}:{bound}/ (Ctrl-C stops)")
    if host not in LOOPBACK:
        announce(
            f"listening on {host}: anyone who can reach this machine can read these threads "
            "(secrets redacted) and mark corrections"
        )
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
