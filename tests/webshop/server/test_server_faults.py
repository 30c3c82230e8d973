"""One error per fault class on every route family (native, ``/agentgym``, ``/agl``).

Each class gets one status (422; 400 under ``/agl``, as the Agent Lightning example's
server answers bad bodies) and one message shape; the session it was aimed at loses
nothing. The one documented exception: AgentGym's family plays an empty action as a no-op
step, as its real server does (docs/webshop-protocol.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
import pytest

JSON = {"content-type": "application/json"}


@dataclass(frozen=True)
class Family:
    """A route family's step route, the body fields that name its session, its reset
    route with a body that names a goal, and its status for a bad body."""

    name: str
    bad_body: int

    def open(self, client: httpx.Client) -> tuple[str, dict, str]:
        """(step path, body fields naming the session, native id to read it back by)."""
        if self.name == "native":
            sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
            return f"/sessions/{sid}/step", {}, sid
        if self.name == "agentgym":
            env_idx = client.post("/agentgym/create").json()
            return "/agentgym/step", {"env_idx": env_idx}, f"ag-{env_idx}"
        sid = client.post("/agl/reset", json={"goal_id": 0}).json()["session_id"]
        return "/agl/step", {"session_id": sid}, sid


FAMILIES = [Family("native", 422), Family("agentgym", 422), Family("agl", 400)]
IDS = [f.name for f in FAMILIES]


def _error(r: httpx.Response, family: Family, status: int) -> str:
    """The message of an error answer, checked for the family's shape."""
    assert r.status_code == status, (family.name, r.status_code, r.text)
    body = r.json()
    assert isinstance(body["detail"], str) and body["detail"], body
    if family.name == "agl":
        assert body == {"detail": body["detail"], "error": body["detail"]}
    else:
        assert body == {"detail": body["detail"]}
    return body["detail"]


def _steps_taken(client: httpx.Client, native_id: str) -> int:
    return client.get(f"/sessions/{native_id}").json()["num_steps"]


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
@pytest.mark.parametrize(
    ("content", "shape"),
    [
        (b"{not json", r"malformed JSON body: Expecting property name .+"),
        (b'{"action": "search[a]"', r"malformed JSON body: Expecting .+"),
        (b"[" * 20_000 + b"]" * 20_000, r"unreadable JSON body: nested too deeply"),
        (b'{"action": ' + b"9" * 5_000 + b"}", r"unreadable JSON body: Exceeds the limit .+"),
        (b'{"action": "search[\xff]"}', r"unreadable JSON body: not UTF-8: .+ at byte 19"),
    ],
    ids=["malformed", "unclosed", "deep", "long-integer", "not-utf8"],
)
def test_bodies_that_are_not_json_one_status_one_shape(
    client: httpx.Client, family: Family, content: bytes, shape: str
) -> None:
    path, _, native_id = family.open(client)
    message = _error(client.post(path, content=content, headers=JSON), family, family.bad_body)
    assert re.fullmatch(shape, message), message
    assert _steps_taken(client, native_id) == 0


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_wrong_types_refused_strictly(client: httpx.Client, family: Family) -> None:
    """Each wrong type is one problem named by its field: ``body.<field>: <problem>``."""
    path, names, native_id = family.open(client)
    not_str, not_int = "Input should be a valid string", "Input should be a valid integer"
    cases = [
        (path, {**names, "action": 5}, ("body.action", not_str)),
        (path, {**names, "action": ["search[a]"]}, ("body.action", not_str)),
    ]
    if family.name == "agentgym":  # the id itself, as a string of digits or a boolean
        step = {"action": "search[a]"}
        cases.append((path, {**step, "env_idx": str(names["env_idx"])}, ("body.env_idx", not_int)))
        cases.append((path, {**step, "env_idx": True}, ("body.env_idx", not_int)))
        cases.append(
            ("/agentgym/reset", {**names, "session_id": "3"}, ("body.session_id", not_int))
        )
    elif family.name == "agl":
        either = "Input should be a goal index (an integer) or a session id (a string)"
        cases.append((path, {"session_id": 7, "action": "x"}, ("body.session_id", not_str)))
        cases.append(("/agl/reset", {"goal_id": True}, ("body.goal_id", not_int)))
        cases.append(("/agl/reset", {"session_id": 1.5}, ("body.session_id", either)))
        cases.append(("/agl/reset", {"session_id": True}, ("body.session_id", either)))
    else:
        cases.append(("/sessions", {"goal_id": True}, ("body.goal_id", not_int)))
        cases.append(("/sessions", {"seed": "7"}, ("body.seed", not_int)))
    for where, payload, (field, problem) in cases:
        message = _error(client.post(where, json=payload), family, family.bad_body)
        assert message == f"{field}: {problem}", (payload, message)
    assert _steps_taken(client, native_id) == 0


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_unknown_fields(client: httpx.Client, family: Family) -> None:
    """Refused natively (a typo is no silent default); the compatible families ignore them
    as the servers they stand in for do (the documented exception)."""
    path, names, native_id = family.open(client)
    r = client.post(path, json={**names, "action": "search[a]", "actoin": "click[b]"})
    if family.name == "native":
        assert _error(r, family, 422) == "body.actoin: Extra inputs are not permitted"
        assert _steps_taken(client, native_id) == 0
    else:
        assert r.status_code == 200, r.text
        assert _steps_taken(client, native_id) == 1


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_empty_action(client: httpx.Client, family: Family) -> None:
    path, names, native_id = family.open(client)
    first = client.get(f"/sessions/{native_id}/observation").json()["observation"]
    r = client.post(path, json={**names, "action": ""})
    if family.name == "agentgym":  # the documented exception: a no-op step, as the real one
        assert r.status_code == 200, r.text
        assert r.json() == {"state": first, "reward": 0.0, "done": False, "info": None}
        assert _steps_taken(client, native_id) == 1
        return
    message = _error(r, family, family.bad_body)
    assert message == "body.action: action is empty; send search[<keywords>] or click[<element>]"
    assert _steps_taken(client, native_id) == 0


@pytest.mark.parametrize(
    ("family", "payload", "path", "named"),
    [
        (FAMILIES[0], {"action": "search[a]"}, "/sessions/never-made/step", "'never-made'"),
        (FAMILIES[0], {"action": "search[a]"}, "/sessions/ag-0/step", "'ag-0'"),
        (FAMILIES[1], {"env_idx": -1, "action": "search[a]"}, "/agentgym/step", "-1"),
        (FAMILIES[1], {"env_idx": 10**9, "session_id": 0}, "/agentgym/reset", "1000000000"),
        (FAMILIES[2], {"session_id": "ag-0", "action": "search[a]"}, "/agl/step", "'ag-0'"),
        (FAMILIES[2], {"session_id": "never-made", "action": "x"}, "/agl/step", "'never-made'"),
    ],
    ids=["native", "native-foreign", "agentgym", "agentgym-reset", "agl-foreign", "agl"],
)
def test_unknown_session_named_as_sent(
    client: httpx.Client, family: Family, payload: dict, path: str, named: str
) -> None:
    client.post("/agentgym/create")  # env 0 exists: a foreign family's id is still unknown
    message = _error(client.post(path, json=payload), family, 404)
    assert message == f"unknown session {named}"
    if family.name == "agentgym":
        r = client.get("/agentgym/observation", params={"env_idx": payload["env_idx"]})
        assert _error(r, family, 404) == f"unknown session {named}"
