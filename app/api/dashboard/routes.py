"""The dashboard's pages: overview, rollouts, one episode, compare; login for the token.

Read-only by construction: every page reads through :func:`readonly_engine`, which logs
in as ``WSRL_SQL_USER`` (``wsrl_readonly``: SELECT grants only) with
``default_transaction_read_only`` on. When ``WSRL_API_TOKEN`` is set, every page needs it,
as a bearer header or as the cookie the login form sets; without it the answer is 401.
Query parameters are parsed here, not by FastAPI, so that bad input gets an HTML page
with a 4xx status that says what is wrong.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from app.api.dashboard import PATH, charts, queries
from app.config import Settings
from app.db.lifecycle import RolloutMode, RolloutStatus

router = APIRouter(prefix=PATH, include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
templates.env.globals["base"] = PATH

COOKIE = "wsrl_dashboard"
PAGE_SIZES = (25, 50, 100, 200)
MAX_TEXT = 200
# While a run is live (rollouts queued or running, or a train step this recent) the
# overview reloads itself every REFRESH_S seconds.
LIVE_WITHIN_S = 120
REFRESH_S = 10


class DashboardError(Exception):
    """A request the dashboard answers with an error page (4xx, or 503 for the database)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def readonly_engine(settings: Settings) -> Engine:
    """An engine that logs in as the read-only role in read-only transactions."""
    url = make_url(settings.resolved_database_url()).set(
        username=settings.sql_user, password=settings.sql_password
    )
    return create_engine(
        url,
        pool_size=4,
        max_overflow=4,
        pool_pre_ping=True,
        connect_args={"options": "-c default_transaction_read_only=on -c statement_timeout=15000"},
    )


@contextmanager
def _read(request: Request) -> Iterator[Connection]:
    try:
        with request.app.state.dashboard_engine.connect() as conn:
            yield conn
    except OperationalError as exc:
        first = str(exc.orig or exc).strip().splitlines()[0]
        raise DashboardError(
            503,
            f"the database cannot be read as {request.app.state.settings.sql_user}: {first} "
            "(is it up and migrated? `wsrl db upgrade`)",
        ) from exc


# --- access ----------------------------------------------------------------------------------


def _cookie_value(token: str) -> str:
    """What the login cookie holds: a digest of the token, not the token itself."""
    return hashlib.sha256(f"wsrl-dashboard:{token}".encode()).hexdigest()


def _authorised(request: Request) -> bool:
    token: str = request.app.state.settings.api_token
    if not token:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token.encode()):
        return True
    cookie = request.cookies.get(COOKIE, "")
    return hmac.compare_digest(cookie.encode(), _cookie_value(token).encode())


def _login_page(request: Request, message: str, status_code: int = 401) -> HTMLResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return templates.TemplateResponse(
        request,
        "login.html",
        {"message": message, "next": target, "title": "Sign in"},
        status_code=status_code,
        headers={"WWW-Authenticate": "Bearer"},
    )


def _safe_next(target: str) -> str:
    """Only a dashboard path (no other host, no scheme) is a place to go after login."""
    if target.startswith(PATH) and not target.startswith("//") and "\\" not in target:
        return target
    return PATH


@router.post("/login")
async def login(request: Request) -> Response:
    form = parse_qs((await request.body()).decode(errors="replace"))
    given = (form.get("token") or [""])[0]
    target = _safe_next((form.get("next") or [PATH])[0])
    token: str = request.app.state.settings.api_token
    if token and not hmac.compare_digest(given.encode(), token.encode()):
        request.scope["path"], request.scope["query_string"] = target, b""
        return _login_page(request, "wrong token: it must equal WSRL_API_TOKEN")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, _cookie_value(token), httponly=True, samesite="strict", path=PATH)
    return response


def _guard(request: Request) -> None:
    if not _authorised(request):
        raise _Unauthorised


class _Unauthorised(Exception):
    pass


# --- parsing ---------------------------------------------------------------------------------


def _one(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise DashboardError(400, f"{name} is given {len(values)} times; give it once")
    value = values[0].strip() if values else ""
    if "\x00" in value:
        raise DashboardError(400, f"{name} holds a NUL character")
    return value or None


def _int(request: Request, name: str, low: int = 0, high: int = 2**31 - 1) -> int | None:
    value = _one(request, name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise DashboardError(400, f"{name}={value[:40]!r} is not a whole number") from None
    if not low <= number <= high:
        raise DashboardError(400, f"{name}={number} is out of range ({low} to {high})")
    return number


def _float(request: Request, name: str) -> float | None:
    value = _one(request, name)
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise DashboardError(400, f"{name}={value[:40]!r} is not a number") from None
    if not math.isfinite(number):
        raise DashboardError(400, f"{name}={value[:40]!r} is not a finite number")
    return number


def _choice(request: Request, name: str, allowed: tuple[str, ...]) -> str | None:
    value = _one(request, name)
    if value is not None and value not in allowed:
        raise DashboardError(400, f"{name}={value[:40]!r} is not one of: {', '.join(allowed)}")
    return value


def _filters(request: Request) -> queries.RolloutFilters:
    success = _choice(request, "success", ("yes", "no"))
    reward_min, reward_max = _float(request, "reward_min"), _float(request, "reward_max")
    if reward_min is not None and reward_max is not None and reward_min > reward_max:
        raise DashboardError(400, f"reward_min {reward_min:g} is above reward_max {reward_max:g}")
    text = _one(request, "q")
    if text is not None and len(text) > MAX_TEXT:
        raise DashboardError(400, f"the goal text filter is longer than {MAX_TEXT} characters")
    split = _one(request, "split")
    if split is not None and len(split) > 40:
        raise DashboardError(400, "split is longer than 40 characters")
    return queries.RolloutFilters(
        version=_int(request, "version"),
        split=split,
        mode=_choice(request, "mode", tuple(m.value for m in RolloutMode)),
        status=_choice(request, "status", tuple(s.value for s in RolloutStatus)),
        success=None if success is None else success == "yes",
        reward_min=reward_min,
        reward_max=reward_max,
        failure=_choice(request, "failure", queries.FAILURE_KINDS),
        goal=_int(request, "goal"),
        text=text,
    )


def _rollout_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise DashboardError(400, f"{value[:60]!r} is not a rollout id (a UUID)") from None


# --- pages -----------------------------------------------------------------------------------


def _page(request: Request, name: str, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context)


@router.get("", response_class=HTMLResponse)
def overview(request: Request) -> HTMLResponse:
    _guard(request)
    settings: Settings = request.app.state.settings
    with _read(request) as conn:
        counts = queries.rollout_counts(conn)
        workers = queries.live_workers(conn)
        versions = queries.recent_versions(conn)
        curve = queries.train_curve(conn)
        times = queries.step_times(conn)
        rounds = queries.eval_rounds(conn)
        last_step_at = queries.last_activity(conn)
        now = conn.exec_driver_sql("SELECT now()").scalar()
    live = counts["queued"] + counts["running"] > 0 or (
        last_step_at is not None and (now - last_step_at).total_seconds() < LIVE_WITHIN_S
    )
    host = request.url.hostname or "127.0.0.1"
    return _page(
        request,
        "overview.html",
        title="Overview",
        refresh_s=REFRESH_S if live else None,
        live=live,
        counts=counts,
        workers=workers,
        versions=versions,
        curve=charts.lines(
            "train reward and success by train step",
            "step",
            [p["step"] for p in curve],
            {"reward": [p["reward"] for p in curve], "success": [p["success"] for p in curve]},
        ),
        curve_points=len(curve),
        curve_legend=charts.legend(["reward", "success"]),
        times=times,
        times_bar=charts.stacked_bar("mean seconds per phase of a train step", times["phases"]),
        times_legend=charts.legend(list(times["phases"])),
        rounds=rounds,
        held_out=charts.held_out(
            "held-out success and mean reward by policy version, 95 % intervals", rounds
        ),
        held_out_legend=charts.legend(["mean reward", "success"]),
        flower_url=f"{request.url.scheme}://{host}:{settings.flower_port}",
        tensorboard_url=f"{request.url.scheme}://{host}:6006",
    )


@router.get("/rollouts", response_class=HTMLResponse)
def rollouts(request: Request) -> HTMLResponse:
    _guard(request)
    filters = _filters(request)
    limit = _int(request, "limit", 1, max(PAGE_SIZES))
    limit = 50 if limit is None else limit
    after_value = _one(request, "after")
    try:
        after = None if after_value is None else queries.Cursor.decode(after_value)
    except ValueError as exc:
        raise DashboardError(
            400, f"after={after_value[:60]!r} is not a page cursor: {exc}"
        ) from None
    with _read(request) as conn:
        rows, next_cursor = queries.rollout_page(conn, filters, limit, after)
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "after" and v]
    next_url = (
        f"{PATH}/rollouts?{urlencode([*kept, ('after', next_cursor.encode())])}"
        if next_cursor
        else None
    )
    first_url = f"{PATH}/rollouts?{urlencode(kept)}" if after else None
    return _page(
        request,
        "rollouts.html",
        title="Rollouts",
        rows=rows,
        filters=filters,
        params=request.query_params,
        limit=limit,
        page_sizes=PAGE_SIZES,
        next_url=next_url,
        first_url=first_url,
        modes=[m.value for m in RolloutMode],
        statuses=[s.value for s in RolloutStatus],
        failure_kinds=queries.FAILURE_KINDS,
    )


@router.get("/rollouts/{rollout_id}", response_class=HTMLResponse)
def episode(request: Request, rollout_id: str) -> HTMLResponse:
    _guard(request)
    ident = _rollout_id(rollout_id)
    with _read(request) as conn:
        row = queries.rollout(conn, ident)
        if row is None:
            raise DashboardError(404, f"no rollout {ident}")
        tries = queries.attempts(conn, ident)
        versions = queries.goal_versions(conn, row["goal_id"])
    return _page(
        request,
        "episode.html",
        title=f"Rollout {str(ident)[:8]}",
        r=row,
        attempts=tries,
        versions=versions,
    )


@router.get("/compare", response_class=HTMLResponse)
def compare(request: Request) -> HTMLResponse:
    _guard(request)
    goal = _int(request, "goal")
    if goal is None:
        raise DashboardError(400, "compare needs goal=<goal id> (and a=, b= policy versions)")
    a, b = _int(request, "a"), _int(request, "b")
    with _read(request) as conn:
        played = queries.goal_versions(conn, goal)
        if not played:
            raise DashboardError(404, f"no finished episode of goal {goal}")
        if a is None or b is None:
            if len(played) < 2:
                raise DashboardError(
                    404, f"goal {goal} was played by one policy version only (v{played[0]})"
                )
            a = played[0] if a is None else a
            b = played[-1] if b is None else b
        sides = []
        for version in (a, b):
            ident = queries.latest_episode(conn, goal, version)
            if ident is None:
                raise DashboardError(
                    404,
                    f"no finished episode of goal {goal} by v{version} "
                    f"(played by: {', '.join(f'v{v}' for v in played)})",
                )
            sides.append(
                {
                    "version": version,
                    "r": queries.rollout(conn, ident),
                    "attempts": queries.attempts(conn, ident),
                }
            )
    return _page(
        request,
        "compare.html",
        title=f"Goal {goal}: v{a} vs v{b}",
        goal=goal,
        sides=sides,
        played=played,
    )


# --- errors ----------------------------------------------------------------------------------


async def dashboard_error(request: Request, exc: Exception) -> Response:
    """The error page of :class:`DashboardError` (registered by ``create_app``)."""
    if isinstance(exc, _Unauthorised):
        return _login_page(request, "this dashboard needs the API token (WSRL_API_TOKEN)")
    assert isinstance(exc, DashboardError)
    return templates.TemplateResponse(
        request,
        "error.html",
        {"title": f"Error {exc.status_code}", "message": exc.message, "code": exc.status_code},
        status_code=exc.status_code,
    )


EXCEPTIONS = (DashboardError, _Unauthorised)
