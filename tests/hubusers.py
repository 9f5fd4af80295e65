"""Several callers on one test server, as JupyterHub's identity provider would present them.

``TokenUsersIdentityProvider`` (``c.ServerApp.identity_provider_class =
"hubusers.TokenUsersIdentityProvider"``, with tests/ on the server's ``PYTHONPATH``) reads
``$GPUQUEUE_TEST_USERS``: a JSON object token -> ``{"name", "scopes", "groups"}``. A request
carrying ``Authorization: token <token>`` of that object is that user, with ``current_user.hub_user``
the Hub user model JupyterHub's provider would resolve (name, kind, scopes, groups); any other
request is anonymous (jupyter_server refuses it with 403 before a handler runs). With
``c.GpuQueueApp.mode = "hub-service"`` the queue then enforces its custom scopes and takes teams
from the groups (``group_local_queues``), as it does behind a real Hub (tests/hub/ test that).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from jupyter_server.auth.identity import IdentityProvider, User

USERS_ENV = "GPUQUEUE_TEST_USERS"


@dataclass
class HubUser(User):
    hub_user: dict = field(default_factory=dict)


class TokenUsersIdentityProvider(IdentityProvider):
    def _users(self) -> dict:
        if not hasattr(self, "_by_token"):
            self._by_token = json.loads(os.environ.get(USERS_ENV) or "{}")
        return self._by_token

    def get_user(self, handler):
        auth = handler.request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() not in ("token", "bearer"):
            token = handler.get_argument("token", "") if hasattr(handler, "get_argument") else ""
        info = self._users().get(token.strip())
        if info is None:
            return None
        handler._token_authenticated = True  # as jupyter_server's provider does: no XSRF check then
        hub_user = {"kind": "user", "name": info["name"], "scopes": list(info.get("scopes") or ()),
                    "groups": list(info.get("groups") or ())}
        return HubUser(username=info["name"], name=info["name"], display_name=info["name"], hub_user=hub_user)

    def get_user_cookie(self, handler):
        return None

    @property
    def auth_enabled(self) -> bool:
        return True
