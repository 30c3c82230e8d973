"""Every write needs the bearer token; reads are open."""

from __future__ import annotations

import uuid

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers.api_rows import AUTH

WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def _write_routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, concrete path) of a write operation in the app's OpenAPI schema."""
    found = []
    for path, operations in app.openapi()["paths"].items():
        for method in sorted(m.upper() for m in operations if m.upper() in WRITE_METHODS):
            concrete = path.replace("{rollout_id}", str(uuid.uuid4())).replace("{number}", "1")
            found.append((method, concrete))
    return found


def test_app_has_the_expected_write_routes(api_app: FastAPI) -> None:
    paths = {path.split("/")[2] for _, path in _write_routes(api_app)}
    assert paths == {"rollouts", "policy", "gateway"}


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "missing bearer token"),
        ({"Authorization": "Bearer wrong"}, "wrong bearer token"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "missing bearer token"),
    ],
)
def test_every_write_without_valid_token_401(
    client: TestClient, api_app: FastAPI, headers: dict[str, str], message: str
) -> None:
    for method, path in _write_routes(api_app):
        response = client.request(method, path, json={}, headers=headers)
        assert response.status_code == 401, (method, path, response.text)
        assert message in response.json()["detail"]
        assert response.headers["www-authenticate"] == "Bearer"


def test_write_with_token_passes_auth(client: TestClient) -> None:
    response = client.post("/v1/rollouts", json={}, headers=AUTH)
    assert response.status_code == 422  # past auth: the empty body is what is wrong


def test_reads_need_no_token(client: TestClient) -> None:
    assert client.get("/v1/rollouts").status_code == 200
    assert client.get("/v1/stats").status_code == 200
    assert client.get("/health").status_code == 200


def test_openapi_docs_served(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    schema = client.get("/openapi.json").json()
    assert "/v1/rollouts/{rollout_id}/trajectory" in schema["paths"]
