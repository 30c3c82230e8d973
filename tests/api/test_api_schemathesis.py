"""The API against its own OpenAPI schema: schemathesis generates requests for every
operation (valid and invalid ones, with the write token) and sends them to the app served
by uvicorn on a Postgres database of its own and the session's Redis.

Every answer must be documented (status, content type, body schema) and none a 5xx; the
generated invalid requests must be refused. The run is bounded (``EXAMPLES`` per
operation, derandomized, no example database) to stay well under a minute and a half.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis
import schemathesis
from helpers.api_rows import AUTH
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import (
    allow_header_conformance,
    positive_data_acceptance,
    unsupported_method,
)

from app.api.main import create_app
from app.config import Settings
from app.core.endpoint import withdraw_endpoint
from app.db import migrate
from app.webshop.server.runner import RunningServer, serve_in_thread

EXAMPLES = 60
# Left out, with reasons: a schema-valid enqueue naming goals that do not exist is a 422
# by design (positive_data_acceptance); GET and PUT /v1/policy sit on two routers, and
# Starlette's 405 names only the first one's methods (allow header, unsupported method).
EXCLUDED = [positive_data_acceptance, allow_header_conformance, unsupported_method]


@pytest.fixture(scope="module")
def served_api(api_settings: Settings, make_database: Callable[[], str]) -> Iterator[RunningServer]:
    """The API on a database of its own (the generated policy versions would otherwise
    stay in the session's), withdrawing what it publishes in Redis afterwards."""
    database_url = make_database()
    migrate.upgrade(database_url)
    settings = api_settings.model_copy(update={"database_url": database_url})
    with serve_in_thread(create_app(settings)) as running:
        yield running
    client = redis.Redis.from_url(settings.resolved_redis_url())
    withdraw_endpoint(client)
    client.close()


# The schema does not depend on the settings; building the app connects to nothing.
schema = schemathesis.openapi.from_dict(create_app(Settings(_env_file=None)).openapi())


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_schema(case: schemathesis.Case, served_api: RunningServer) -> None:
    case.call_and_validate(base_url=served_api.url, headers=AUTH, excluded_checks=EXCLUDED)
