"""`octopoid web`: the review page, a Starlette app rendering Jinja2 templates.

A face like cli.py: each route parses the request, calls one function the CLI also calls
(``review``, ``queue_utils``, ``recovery``, ``intake``, ``pages``), and renders. Endpoints
are plain functions, so Starlette runs them in its thread pool (the queue and git block).
A route or form's task id is made a ``TaskId`` where it comes in, like the CLI's; every
value is escaped by Jinja2's autoescape; every POST is checked against the CSRF token
(``security``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
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

from ... import config
from ...base.text import ascii_int, clean_text
from ...model.exceptions import (
    InvalidInput,
    InvalidTask,
    InvalidTaskId,
    OctopoidError,
    TaskNotFound,
)
from ...model.tasks import PRIORITIES, TaskId, TaskState
from ...queue import intake, questions, recovery, steering
from ...queue import machine as queue_utils
from ...review import drafts
from ...review import verdicts as review
from ...review.comments import line_comment
from ...roles import plans
from .. import preview
from . import board, pages, stats_page
from .diffview import pygments_css
from .previews import Doors
from .security import TokenGate, csrf_for, same

HERE = Path(__file__).parent
ACTOR = "web"
MAX_DRAFT_BYTES = 4 * 1024 * 1024  # 200 comments at their longest fit well within
CSRF_REFUSED = "forbidden: bad or missing CSRF token; reload the page"
#: What a redirect after an action may say; the query names a key, never free text.
DONE = {
    "accepted": "Accepted: merged into its base and done.",
    "rejected": "Rejected: back in incoming, with the reason (and comments) in its notes.",
    "retried": "Back in incoming with fresh attempts.",
    "requeued": "Taken back from its agent and back in incoming.",
    "closed": "Closed without a merge: done.",
    "approved": "Split approved: its subtasks are queued and it is done.",
    "enqueued": "Queued.",
    "plan-approved": "Plan approved: its tasks are queued, each after the tasks it waits for.",
    "plan-discarded": "Plan discarded: nothing was queued.",
    "answered": "Answered: the answer is in its notes, and the task may run again.",
    "said": "Sent: the running attempt reads it before its next step; it is in the notes too.",
    "stop-asked": "Stop asked: its runner ends the attempt in a moment and gives the task "
    "back to incoming, the attempt not counted.",
    "preview-started": "Preview started: open it from the link beside the diff.",
    "preview-starting": "The preview is still starting: reload this page in a moment.",
    "preview-stopped": "Preview stopped.",
}


def _status_of(exc: OctopoidError) -> int:
    if isinstance(exc, TaskNotFound):
        return 404
    if isinstance(exc, InvalidInput | InvalidTask | InvalidTaskId):
        return 400
    return 409


def create_app(token: str, host: str = "127.0.0.1") -> TokenGate:
    doors = Doors(host)  # previews' ports, on the address this page listens on
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    csrf = csrf_for(token)

    def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        context.update(
            csrf=csrf, request=request, priorities=PRIORITIES, reviewer=reviewer_of(request)
        )
        return HTMLResponse(env.get_template(name).render(**context), status_code=status)

    async def form_of(request: Request) -> FormData:
        """The POSTed form, after its CSRF token (field or header) is checked."""
        form = await request.form()
        given = form.get("csrf") or request.headers.get("x-csrf-token")
        if not same(given if isinstance(given, str) else None, csrf):
            raise HTTPException(403, CSRF_REFUSED)
        return form

    def board_page(request: Request, status: int = 200, **extra: Any) -> HTMLResponse:
        extra.setdefault("form", {})
        extra.setdefault("error", None)
        extra.setdefault("done", DONE.get(request.query_params.get("done", "")))
        found = board.board(request.query_params)
        return render(request, "board.html", status, board=found, **extra)

    def stats_view(request: Request) -> Response:
        try:
            found = stats_page.page(request.query_params)
        except OctopoidError as exc:
            return render(request, "error.html", _status_of(exc), message=str(exc))
        return render(request, "stats.html", page=found)

    def board_fragment(request: Request) -> Response:
        return render(request, "_board.html", board=board.board(request.query_params))

    def task_page(
        request: Request, status: int = 200, error: str | None = None, typed: Any = None
    ) -> Response:
        raw = request.path_params["task_id"]
        try:
            page = pages.task_page(TaskId(raw), reviewer_of(request), typed)
        except OctopoidError as exc:
            return render(request, "error.html", _status_of(exc), message=str(exc))
        done = DONE.get(request.query_params.get("done", ""))
        split = request.query_params.get("view") == "split"
        shown = _preview(request, page["task"], doors)
        return render(
            request, "task.html", status, page=page, done=done, error=error, split=split,
            preview=shown,
        )  # fmt: skip

    async def preview_act(request: Request) -> Response:
        """Start the task's preview (and open its door) or stop it."""
        form = await form_of(request)
        try:
            task_id = TaskId(request.path_params["task_id"])
            if form.get("do") == "stop":
                await run_in_threadpool(preview.stop, task_id)
                await doors.closing(task_id)
                return RedirectResponse(f"/tasks/TASK-{task_id}?done=preview-stopped", 303)
            found = await run_in_threadpool(preview.start, task_id)
        except OctopoidError as exc:
            return await run_in_threadpool(task_page, request, _status_of(exc), str(exc))
        if not found.ready:
            return RedirectResponse(f"/tasks/TASK-{task_id}?done=preview-starting", 303)
        doors.review = str(request.base_url)
        await doors.opening(task_id, found.socket)
        return RedirectResponse(f"/tasks/TASK-{task_id}?done=preview-started", 303)

    async def save_draft(request: Request) -> Response:
        """The page's draft review (JSON), kept for this reviewer; the answer is the draft
        as kept, or 400 with what is wrong."""
        if not same(request.headers.get("x-csrf-token"), csrf):
            raise HTTPException(403, CSRF_REFUSED)
        body = b""
        async for chunk in request.stream():  # read no further than a draft can be
            body += chunk
            if len(body) > MAX_DRAFT_BYTES:
                return JSONResponse({"error": "the draft is too big"}, status_code=413)
        try:
            task = await run_in_threadpool(
                queue_utils.get_task, TaskId(request.path_params["task_id"])
            )
            data = json.loads(body)
            kept = await run_in_threadpool(drafts.save, task.id, reviewer_of(request), data)
        except ValueError:
            return JSONResponse({"error": "the draft is not JSON"}, status_code=400)
        except OctopoidError as exc:
            return JSONResponse({"error": str(exc)}, status_code=_status_of(exc))
        return JSONResponse(kept.as_json())

    def live(request: Request) -> Response:
        """The running attempt's output after byte ``after``, as JSON; ``running`` false
        once it has ended (the page then reloads, once, into review)."""
        try:
            task = queue_utils.get_task(TaskId(request.path_params["task_id"]))
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
        reviewer = reviewer_of(request)
        try:
            task_id = TaskId(request.path_params["task_id"])
            await run_in_threadpool(do, task_id, form, reviewer)
        except OctopoidError as exc:
            typed = _typed(form) if request.path_params["action"] == "reject" else None
            return await run_in_threadpool(task_page, request, _status_of(exc), str(exc), typed)
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

    async def plan_act(request: Request) -> Response:
        """Approve or discard a plan from the board; a refusal shows the board with why."""
        await form_of(request)  # its CSRF token is checked; the form holds nothing else
        if request.path_params["action"] not in PLAN_ACTIONS:
            return PlainTextResponse("no such action", status_code=404)
        do, done = PLAN_ACTIONS[request.path_params["action"]]
        try:
            await run_in_threadpool(do, request.path_params["plan_id"], reviewer_of(request))
        except OctopoidError as exc:
            status, error = _status_of(exc), str(exc)
            return await run_in_threadpool(lambda: board_page(request, status, error=error))
        return RedirectResponse(f"/?done={done}", status_code=303)

    routes = [
        Route("/", board_page),
        Route("/board", board_fragment),
        Route("/stats", stats_view),
        Route("/enqueue", enqueue, methods=["POST"]),
        Route("/tasks/{task_id}", task_page),
        Route("/tasks/{task_id}/live.json", live),
        Route("/tasks/{task_id}/draft", save_draft, methods=["POST"]),
        Route("/tasks/{task_id}/preview", preview_act, methods=["POST"]),
        Route("/tasks/{task_id}/{action}", act, methods=["POST"]),
        Route("/plans/{plan_id}/{action}", plan_act, methods=["POST"]),
        Route("/pygments.css", lambda request: Response(pygments_css(), media_type="text/css")),
        Route("/favicon.ico", lambda request: Response(status_code=204)),  # none: no 404s
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    gate = TokenGate(Starlette(routes=routes), token)
    doors.sessions, doors.cookie = gate.sessions, gate.cookie  # a door signs in as the page
    return gate


def _preview(request: Request, task: Any, doors: Doors) -> dict[str, Any] | None:
    """What the task page says of its preview: nothing without ``preview.command`` or
    outside review; its link once its door is open; else how to start it."""
    if not config.load_config()["preview"]["command"] or task.state is not TaskState.PROVISIONAL:
        return None
    found = preview.running(task.id)
    port = doors.port_of(task.id) if found is not None and found.ready else None
    host = request.url.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{port}/" if port else None
    return {"url": url, "running": found is not None}


# --- actions: the CLI's own functions ------------------------------------------------------


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


def reviewer_of(request: Request) -> str:
    """Who is reviewing: the name their sign-in gave (the session's), else "web"."""
    return str(request.scope.get("octopoid.reviewer") or ACTOR)


def _comments(form: FormData) -> list[dict[str, str]]:
    """The line comments a form sends, as their fields (path, line, end, side, text): a
    path may hold ':' or any character, so nothing is packed into one string."""
    fields = {key: form.getlist(f"comment_{key}") for key in COMMENT_FIELDS}
    if len({len(values) for values in fields.values()}) > 1:
        raise InvalidInput("the page sent a comment with missing fields: reload it")
    return [
        {key: str(fields[key][i]) for key in COMMENT_FIELDS} for i in range(len(fields["path"]))
    ]


def _typed(form: FormData) -> dict[str, Any]:
    """What a refused reject sent, to show again as it was typed (not a word lost)."""
    comments = []
    try:
        raw = _comments(form)
    except InvalidInput:
        raw = []
    for c in raw:
        line, end = (ascii_int(c[key]) or 0 for key in ("line", "end"))
        comments.append({**c, "line": line, "end": end, "code": ""})
    return {"reason": str(form.get("reason") or ""), "comments": comments}


def _accept(task_id: str, form: FormData, reviewer: str) -> None:
    forget, edits = _learnings(form)
    keep = _numbers(form.getlist("keep"))
    review.accept(task_id, reviewer, *_judged(form), forget=forget, edits=edits, keep=keep)
    drafts.clear(task_id, reviewer)


def _learnings(form: FormData) -> tuple[list[int], dict[int, str]]:
    """The learnings the Accept form strikes (``forget``) and rewrites (``edit_<n>``)."""
    edits = {
        number: clean_text(str(value), "a learning")
        for key, value in form.multi_items()
        if key.startswith("edit_") and (number := ascii_int(key.removeprefix("edit_"))) is not None
    }
    return _numbers(form.getlist("forget")), edits


def _numbers(values: list[Any]) -> list[int]:
    """The form's numbered choices (learnings kept or struck); anything else is no choice."""
    return [n for n in (ascii_int(str(v)) for v in values) if n is not None]


def _reject(task_id: str, form: FormData, reviewer: str) -> None:
    reason = queue_utils.rejection_reason(clean_text(_field(form, "reason"), "the reason"))
    comments = [
        line_comment(c["path"], c["line"], c["text"], c["end"] or None, c["side"] or "new")
        for c in _comments(form)
    ]
    head, attempt = _judged(form)
    review.reject(task_id, reason, reviewer, comments, head, attempt)
    drafts.clear(task_id, reviewer)


def _close(task_id: str, form: FormData, reviewer: str) -> None:
    reason = clean_text(_field(form, "reason"), "the reason").strip()
    review.close(task_id, "wont-do" if form.get("wont_do") else "done", reason, reviewer)


def _requeue(task_id: str, form: FormData, reviewer: str) -> None:
    reason = clean_text(_field(form, "reason", "requeued from the web page"), "reason")
    recovery.requeue_running(task_id, reason)


def _field(form: FormData, name: str, default: str = "") -> str:
    return str(form.get(name) or default)


ACTIONS = {  # name in the URL: (what it does with (task id, form, reviewer), its DONE message)
    "accept": (_accept, "accepted"),
    "reject": (_reject, "rejected"),
    "approve": (lambda task_id, _, who: review.approve(task_id, who), "approved"),
    "retry": (
        lambda t, form, who: review.retry(t, fresh=bool(form.get("fresh")), actor=who),
        "retried",
    ),
    "requeue": (_requeue, "requeued"),
    "close": (_close, "closed"),
    "answer": (lambda t, form, who: questions.answer(t, _field(form, "answer"), who), "answered"),
    "say": (lambda t, form, who: steering.say(t, _field(form, "message"), who), "said"),
    "stop": (lambda t, form, who: steering.ask_stop(t, _field(form, "reason"), who), "stop-asked"),
}
PLAN_ACTIONS = {  # name in the URL: (what it does, the DONE message it ends with)
    "approve": (lambda plan_id, reviewer: plans.approve(plan_id, reviewer), "plan-approved"),
    "discard": (lambda plan_id, reviewer: plans.discard(plan_id), "plan-discarded"),
}
COMMENT_FIELDS = ("path", "line", "end", "side", "text")
ENQUEUE_FIELDS = ("title", "context", "criteria", "priority", "blocked_by", "branch")


def _enqueue(fields: dict[str, str]):
    """A task from the board's form; ``new_task`` refuses a bad priority or no title."""
    return intake.enqueue(
        fields["title"].strip(),
        priority=fields["priority"],
        branch=fields["branch"].strip() or None,
        blocked_by=[fields["blocked_by"]],  # "TASK-1, TASK-2": read as BLOCKED_BY is
        context=fields["context"],
        criteria=[line.strip() for line in fields["criteria"].splitlines() if line.strip()],
    )
