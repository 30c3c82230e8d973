"""Errors the API turns into 4xx answers, raised from routes and services alike.

:class:`NotFoundError` becomes a 404 with its message (one handler in
:mod:`app.api.main`), so no route repeats a "look up or 404" block, and the services
stay usable outside HTTP (the CLI's ``wsrl show`` prints the same message).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy.orm import Session
from sqlalchemy.orm.interfaces import ORMOption

T = TypeVar("T")


class NotFoundError(LookupError):
    """Something named in the request does not exist; the message says what."""


def get_or_404(
    session: Session,
    model: type[T],
    key: Any,
    *,
    what: str | None = None,
    options: Sequence[ORMOption] = (),
) -> T:
    """The row with primary key ``key`` (loaded with ``options``), else :class:`NotFoundError`."""
    row = session.get(model, key, options=options)
    if row is None:
        raise NotFoundError(f"unknown {what or model.__name__.lower()} {key}")
    return row
