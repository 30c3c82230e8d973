"""A goal's ``spec`` checked against its environment's model, with a one-line error."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError


def validated_spec(model: type[BaseModel], data: dict[str, Any], what: str) -> dict[str, Any]:
    """``data`` as ``model`` validates it (None fields left out); raises
    :class:`ValueError` that starts with ``what`` and names each wrong field."""
    try:
        return model.model_validate(data).model_dump(exclude_none=True)
    except ValidationError as exc:
        wrong = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg'].lower()}"
            for e in exc.errors()
        )
        raise ValueError(f"{what}: {wrong}") from None
