"""Per-attempt keys for the LLM gateway: an external agent gets a key for its own attempt only.

An external agent is code the pipeline does not control; giving it ``WSRL_API_TOKEN``
would let it enqueue, publish endpoints or write into other attempts. Its key is instead
an HMAC of the attempt (rollout id and attempt number) under the API token: the gateway
recomputes it from the path, so nothing is stored, a key opens exactly one attempt's
route, and it cannot be turned back into the token.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid

PREFIX = "wsrl-attempt-"


def attempt_key(api_token: str, rollout_id: uuid.UUID | str, attempt: int) -> str:
    """The gateway key of one attempt."""
    message = f"{uuid.UUID(str(rollout_id))}:{attempt}".encode()
    digest = hmac.new(api_token.encode(), message, hashlib.sha256).hexdigest()
    return PREFIX + digest


def gateway_credentials_ok(
    credentials: bytes, api_token: str, rollout_id: uuid.UUID | str, attempt: int
) -> bool:
    """The API token itself or this attempt's key (constant-time comparisons)."""
    if not credentials or not api_token:
        return False
    key = attempt_key(api_token, rollout_id, attempt).encode()
    return hmac.compare_digest(credentials, key) | hmac.compare_digest(
        credentials, api_token.encode()
    )
