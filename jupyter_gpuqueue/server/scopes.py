"""Who may do what: the GPU queue's two JupyterHub custom scopes, checked in one place.

- ``custom:gpuqueue:submit``: submit, list, cancel one's own workloads, read one's own logs.
- ``custom:gpuqueue:admin``: change quotas, cohorts, priority classes and prices, import and export
  the configuration, read the audit log. Implies submit (declare it in ``c.JupyterHub.custom_scopes``
  with ``"subscopes": ["custom:gpuqueue:submit"]``; this module also treats admin as implying submit,
  so a hub configured without the subscope still behaves).

JupyterHub does not enforce custom scopes; the service must (JupyterHub docs,
``docs/source/rbac/scopes.md`` "Custom scopes"). Enforcement is on only where the extension runs as
the hub-managed service (web-app setting :data:`HUB_SCOPES_KEY` true); a standalone server, and a
user's own single-user server, are owned by the one person who can log in to them, so every scope
is granted there (``standalone_admin`` can withhold admin).
"""

from __future__ import annotations

from typing import Any

from ..errors import Forbidden

SUBMIT_SCOPE = "custom:gpuqueue:submit"
ADMIN_SCOPE = "custom:gpuqueue:admin"

HUB_SCOPES_KEY = "gpuqueue_enforce_hub_scopes"
"""Web-app setting: True when custom scopes are enforced (the extension is the hub service)."""

STANDALONE_ADMIN_KEY = "gpuqueue_standalone_admin"
"""Web-app setting: whether the owner of a standalone server holds the admin scope (default True)."""

_IMPLIED = {SUBMIT_SCOPE: (SUBMIT_SCOPE, ADMIN_SCOPE), ADMIN_SCOPE: (ADMIN_SCOPE,)}


def has_scope(handler: Any, scope: str) -> bool:
    """Whether the request's user holds ``scope`` (``SUBMIT_SCOPE`` or ``ADMIN_SCOPE``).

    Under enforcement the user is the Hub user of the request (``current_user.hub_user``, resolved
    by jupyter_server's JupyterHub identity provider from the OAuth cookie or the
    ``Authorization: token`` header) and the check is JupyterHub's own
    ``HubAuth.check_scopes`` (which resolves ``!user=`` / ``!group=`` filters it can).
    """
    settings = handler.settings
    if not settings.get(HUB_SCOPES_KEY):
        if scope == ADMIN_SCOPE:
            return bool(settings.get(STANDALONE_ADMIN_KEY, True))
        return True
    user = getattr(handler, "current_user", None)
    hub_user = getattr(user, "hub_user", None)
    if not isinstance(hub_user, dict):
        return False
    granted = set(hub_user.get("scopes") or ())
    wanted = _IMPLIED.get(scope, (scope,))
    if granted.intersection(wanted):
        return True
    provider = settings.get("identity_provider")
    hub_auth = getattr(provider, "hub_auth", None)
    if hub_auth is None:
        return False
    return any(bool(hub_auth.check_scopes([s], hub_user)) for s in wanted)


def require_scope(handler: Any, scope: str) -> None:
    """Raise :class:`~jupyter_gpuqueue.errors.Forbidden` (403) naming ``scope`` unless held."""
    if not has_scope(handler, scope):
        who = _user_name(handler)
        raise Forbidden(
            f"{who} lacks the JupyterHub scope {scope}: ask a hub admin to grant it through a role"
            " (for requests from a user's server, c.Spawner.server_token_scopes must list it too)",
            field="scope",
        )


def _user_name(handler: Any) -> str:
    hub_user = getattr(getattr(handler, "current_user", None), "hub_user", None)
    if isinstance(hub_user, dict) and hub_user.get("name"):
        return f"{hub_user.get('kind', 'user')} {hub_user['name']}"
    return "this request"
