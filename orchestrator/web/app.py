"""`octopoid web`: the review page, a Starlette app rendering Jinja2 templates.

A face like cli.py: each route parses the request, calls one function the CLI also calls
(``review``, ``queue_utils``, ``recovery``, ``intake``, ``pages``), and renders. Endpoints
are plain functions, so Starlette runs them in its thread pool (the queue and git block).
Task ids go through ``normalize_task_id`` like the CLI's; every value is escaped by Jinja2's
autoescape; every POST is checked against the CSRF token (``security``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import intake, queue_utils, recovery, review
from ..exceptions import (
    InvalidInput,
    InvalidTask,
    InvalidTaskId,
    OctopoidError,
    TaskNotFound,
)
from ..tasks import PRIORITIES, TaskState, normalize_task_id
from . import board, pages
from .diffview import pygments_css
from .security import TokenGate, csrf_for, same

HERE = Path(__file__).parent
ACTOR = "web"
#: What a redirect after an action may say; the query names a key, never free text.
DONE = {
    "accepted": "Accepted: merged into its base and done.",
    "rejected": "Rejected: back in incoming, with the reason (and comments) in its notes.",
    "retried": "Back in incoming with fresh attempts.",
    "requeued": "Taken back from its agent and back in incoming.",
    "closed": "Closed without a merge: done.",
    "approved": "Split approved: its subtasks are queued and it is done.",
    "enqueued": "Queued.",
}


def _status_of(exc: OctopoidError) -> int:
    if isinstance(exc, TaskNotFound):
        return 404
    if isinstance(exc, InvalidInput | InvalidTask | InvalidTaskId):
        return 400
    return 409


def create_app(token: str) -> Starlette:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    csrf = csrf_for(token)

    def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        context.update(csrf=csrf, request=request, priorities=PRIORITIES)
        return HTMLResponse(env.get_template(name).render(**context), status_code=status)

    async def form_of(request: Request) -> FormData:
        """The POSTed form, after its CSRF token (field or header) is checked."""
        form = await request.form()
        given = form.get("csrf") or request.headers.get("x-csrf-token")
        if not same(given if isinstance(given, str) else None, csrf):
            raise _Forbidden()
        return form

    def board_page(request: Request, status: int = 200, **extra: Any) -> HTMLResponse:
        extra.setdefault("form", {})
        extra.setdefault("error", None)
        found = board.board(request.query_params)
        return render(request, "board.html", status, board=found, **extra)

    def index(request: Request) -> Response:
        return board_page(request)

    def board_fragment(request: Request) -> Response:
        return render(request, "_board.html", board=board.board(request.query_params))

    def task_page(
        request: Request, status: int = 200, error: str | None = None, typed: Any = None
    ) -> Response:
        raw = request.path_params["task_id"]
        try:
            page = pages.task_page(normalize_task_id(raw))
        except OctopoidError as exc:
            return render(request, "error.html", _status_of(exc), message=str(exc))
        done = DONE.get(request.query_params.get("done", ""))
        typed = typed or {"reason": "", "comments": []}  # a refused action's, shown again
        return render(request, "task.html", status, page=page, done=done, error=error, typed=typed)

    def live(request: Request) -> Response:
        """The running attempt's output after byte ``after``, as JSON; ``running`` false
        once it has ended (the page then reloads, once, into review)."""
        try:
            task = queue_utils.get_task(normalize_task_id(request.path_params["task_id"]))
            after = int(request.query_params.get("after", "-1"))
        except OctopoidError as exc:
            return PlainTextResponse(str(exc), status_code=_status_of(exc))
        except ValueError:
            return PlainTextResponse("after must be a byte offset", status_code=400)
        if task.state is not TaskState.CLAIMED:
            return JSONResponse({"running": False, "text": "", "next": 0})
        text, offset = pages.live_since(task.id, after if after >= 0 else None)
        return JSONResponse({"running": True, "text": text, "next": offset})

    async def act(request: Request) -> Response:
        form = await form_of(request)
        if request.path_params["action"] not in ACTIONS:
            return PlainTextResponse("no such action", status_code=404)
        do, done = ACTIONS[request.path_params["action"]]
        try:
            task_id = normalize_task_id(request.path_params["task_id"])
            await run_in_threadpool(do, task_id, form)
        except OctopoidError as exc:
            return await run_in_threadpool(task_page, request, _status_of(exc), str(exc))
        if form.get("back") == "board":  # a card's button: stay on the board
            return RedirectResponse(f"/?done={done}", status_code=303)
        return RedirectResponse(f"/tasks/TASK-{task_id}?done={done}", status_code=303)

    async def enqueue(request: Request) -> Response:
        form = await form_of(request)
        fields = {key: str(form.get(key) or "") for key in ENQUEUE_FIELDS}
        try:
            task = await run_in_threadpool(_enqueue, fields)
        except OctopoidError as exc:
            status, error = _status_of(exc), str(exc)
            return await run_in_threadpool(
                lambda: board_page(request, status, form=fields, error=error)
            )
        return RedirectResponse(f"/tasks/{task.label}?done=enqueued", status_code=303)

    def stylesheet(request: Request) -> Response:
        return Response(pygments_css(), media_type="text/css")

    routes = [
        Route("/", index),
        Route("/board", board_fragment),
        Route("/enqueue", enqueue, methods=["POST"]),
        Route("/tasks/{task_id}", task_page),
        Route("/tasks/{task_id}/live.json", live),
        Route("/tasks/{task_id}/{action}", act, methods=["POST"]),
        Route("/pygments.css", stylesheet),
        Route("/favicon.ico", lambda request: Response(status_code=204)),  # none: no 404s
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={_Forbidden: _forbidden})
    return TokenGate(app, token)  # type: ignore[return-value]


class _Forbidden(Exception):
    pass


def _forbidden(request: Request, exc: Exception) -> Response:
    return PlainTextResponse("forbidden: bad or missing CSRF token; reload the page", 403)


# --- actions: the CLI's own functions ------------------------------------------------------


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _judged(form: FormData) -> tuple[str | None, int | None]:
    """The branch head (and attempt) the page showed: every review from the page names
    them, so work that arrived after it was loaded is never accepted unseen. A page that
    showed no branch says ``none``."""
    head = str(form.get("head") or "").strip()
    if not head:
        raise InvalidInput("this form does not say which commit you reviewed: reload the page")
    try:
        attempt = int(str(form.get("attempt") or ""))
    except ValueError:
        attempt = None
    return (None if head == "none" else head), attempt


def _accept(task_id: str, form: FormData) -> None:
    review.accept(task_id, ACTOR, *_judged(form))


def _reject(task_id: str, form: FormData) -> None:
    reason = intake.clean_text(str(form.get("reason") or ""), "the reason").strip()
    if not reason:
        raise InvalidInput("a rejection needs a reason: the next attempt reads it")
    comments = [review.parse_line_comment(str(spec)) for spec in form.getlist("comment")]
    head, attempt = _judged(form)
    review.reject(task_id, reason, ACTOR, comments, head, attempt)


def _retry(task_id: str, form: FormData) -> None:
    review.retry(task_id, fresh=bool(form.get("fresh")), actor=ACTOR)


def _approve(task_id: str, form: FormData) -> None:
    review.approve(task_id, ACTOR)


def _requeue(task_id: str, form: FormData) -> None:
    reason = intake.clean_text(str(form.get("reason") or "requeued from the web page"), "reason")
    recovery.requeue_running(task_id, reason)


def _close(task_id: str, form: FormData) -> None:
    reason = intake.clean_text(str(form.get("reason") or ""), "the reason").strip()
    review.close(task_id, "wont-do" if form.get("wont_do") else "done", reason, ACTOR)


ACTIONS = {  # name in the URL: (what it does, the DONE message it ends with)
    "accept": (_accept, "accepted"),
    "reject": (_reject, "rejected"),
    "approve": (_approve, "approved"),
    "retry": (_retry, "retried"),
    "requeue": (_requeue, "requeued"),
    "close": (_close, "closed"),
}
ENQUEUE_FIELDS = ("title", "context", "criteria", "priority", "blocked_by", "branch")


def _enqueue(fields: dict[str, str]):
    if fields["priority"] not in PRIORITIES:
        raise InvalidInput(f"priority must be one of {', '.join(PRIORITIES)}")
    if not fields["title"].strip():
        raise InvalidInput("a task needs a title")
    return intake.enqueue(
        fields["title"].strip(),
        priority=fields["priority"],
        branch=fields["branch"].strip() or None,
        blocked_by=fields["blocked_by"].replace(",", " ").split(),
        context=fields["context"],
        criteria=_lines(fields["criteria"]),
    )
