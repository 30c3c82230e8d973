"""Dependency aliases every route module uses."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.webshop.server.service import WebShopService


def get_service(request: Request) -> WebShopService:
    return request.app.state.service


ServiceDep = Annotated[WebShopService, Depends(get_service)]
