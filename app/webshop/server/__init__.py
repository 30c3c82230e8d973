"""The WebShop env over HTTP: ``create_app(env)`` builds the FastAPI app.

Route families, one module each: :mod:`.native` (the project's API, at ``/``),
:mod:`.agentgym` (AgentGym's WebShop server, at ``/agentgym``) and :mod:`.agl` (the
Agent Lightning WebShop example's server, at ``/agl``). They share one
:class:`.sessions.SessionStore` through :class:`.service.WebShopService`.
"""

from app.webshop.server.app import create_app

__all__ = ["create_app"]
