"""Modes without a hub: how the mode is chosen, what a hub-client server says when it cannot reach
the service, and the validation of teams from groups. (The hub itself: test_hub_service.py.)"""

from __future__ import annotations

import json

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpuqueue.errors import ValidationError
from jupyter_gpuqueue.ports import free_port
from jupyter_gpuqueue.server.app import resolve_mode
from jupyter_gpuqueue.server.forward import Forwarder
from jupyter_gpuqueue.server.hub_groups import HubGroups

API = ("gpuqueue", "api")


@pytest.mark.parametrize(
    "mode, environ, service_url, expected",
    [
        ("auto", {}, None, "standalone"),
        ("auto", {"JUPYTERHUB_SERVICE_NAME": "gpuqueue", "JUPYTERHUB_API_TOKEN": "t"}, None, "hub-service"),
        ("auto", {"JUPYTERHUB_SERVICE_NAME": "notebooks", "JUPYTERHUB_API_TOKEN": "t"}, None, "standalone"),
        ("auto", {"JUPYTERHUB_API_TOKEN": "t"}, None, "standalone"),  # a hub user server, no service
        ("auto", {"JUPYTERHUB_API_TOKEN": "t", "GPUQUEUE_SERVICE_URL": "http://h/services/gpuqueue/"}, None, "hub-client"),
        ("auto", {"JUPYTERHUB_API_TOKEN": "t"}, "http://h/services/gpuqueue/", "hub-client"),
        ("auto", {"GPUQUEUE_SERVICE_URL": "http://h/services/gpuqueue/"}, None, "standalone"),  # no hub token
        ("standalone", {"JUPYTERHUB_SERVICE_NAME": "gpuqueue"}, None, "standalone"),
        ("hub-client", {}, None, "hub-client"),
    ],
)
def test_resolve_mode(mode, environ, service_url, expected):
    assert resolve_mode(mode, hub_service_name="gpuqueue", service_url=service_url, environ=environ) == expected


@pytest.mark.parametrize(
    "url, token, field",
    [("", "t", "service_url"), ("ftp://h/", "t", "service_url"), ("/services/gpuqueue/", "t", "service_url"),
     ("http://h/services/gpuqueue/", "", "token")],
)
def test_forwarder_rejects_unusable_settings(url, token, field):
    with pytest.raises(ValidationError) as e:
        Forwarder(url, token)
    assert e.value.field == field


def test_forwarder_urls():
    f = Forwarder("https://hub.example.org/services/gpuqueue", "t")
    assert f.url("workloads/team-a/x", "a=1") == "https://hub.example.org/services/gpuqueue/gpuqueue/api/workloads/team-a/x?a=1"
    assert f.url("events", ws=True) == "wss://hub.example.org/services/gpuqueue/gpuqueue/api/events"
    assert f.upstream_path() == "/services/gpuqueue/gpuqueue/api"


def test_forwarded_submissions_get_absolute_paths(tmp_path):
    f = Forwarder("http://h/services/gpuqueue/", "t", root_dir=str(tmp_path))
    out = lambda body: json.loads(f.localize_submission(json.dumps(body).encode()))  # noqa: E731
    assert out({"script": "sub/train.py"}) == {"script": str(tmp_path / "sub" / "train.py")}
    assert out({"script": "/abs/train.py", "workingDir": "data"}) == {
        "script": "/abs/train.py", "workingDir": str(tmp_path / "data")}
    assert out({"command": ["python", "-V"]}) == {"command": ["python", "-V"], "workingDir": str(tmp_path)}
    for body in (b"{not json", b'{"manifest": "kind: Job"}', b"[1]"):
        assert f.localize_submission(body) == body
    plain = Forwarder("http://h/services/gpuqueue/", "t")  # forward_local_paths off
    assert plain.localize_submission(b'{"script": "x.py"}') == b'{"script": "x.py"}'


def test_hub_groups_remembers_the_latest_groups():
    groups = HubGroups()
    assert groups("alice") == []
    groups.remember({"kind": "user", "name": "alice", "groups": ["team-b", "team-a"]})
    groups.remember({"kind": "service", "name": "svc"})  # no groups: ignored
    assert groups("alice") == ["team-a", "team-b"] and groups("svc") == []
    groups.remember({"name": "alice", "groups": []})
    assert groups("alice") == []


@pytest.mark.parametrize(
    "mapping, field",
    [({"team-a": "team-a/team-a-queue"}, "group_local_queues['team-a']"),
     ({"team-a": ["team-a-queue"]}, "group_local_queues['team-a']"),
     ({"team-b": ["team-b/"]}, "group_local_queues['team-b']")],
)
def test_group_teams_mapping_is_validated(gpuqueue_service, mapping, field):
    with pytest.raises(ValidationError) as e:
        gpuqueue_service.use_group_teams(mapping, HubGroups())
    assert e.value.field == field


def test_group_teams_resolve_local_queues(gpuqueue_service):
    groups = HubGroups()
    gpuqueue_service.use_group_teams(
        {"team-a": ["team-a/team-a-queue"], "team-b": ["team-b/team-b-queue"], "both": ["team-b/team-b-queue", "team-a/team-a-queue"]},
        groups, hint="ask a hub admin",
    )
    groups.remember({"name": "alice", "groups": ["team-a"]})
    groups.remember({"name": "carol", "groups": ["team-b", "team-a"]})
    lqs = lambda u: [f"{q['namespace']}/{q['name']}" for q in gpuqueue_service.info(u)["localQueues"]]  # noqa: E731
    assert lqs("alice") == ["team-a/team-a-queue"]
    assert lqs("carol") == ["team-a/team-a-queue", "team-b/team-b-queue"]  # sorted groups, de-duplicated
    assert lqs("nobody") == []
    from jupyter_gpuqueue.errors import Forbidden

    with pytest.raises(Forbidden) as e:
        gpuqueue_service.estimate({"command": ["true"], "gpus": 1}, user="nobody")
    assert "ask a hub admin" in str(e.value)


# -- a server in hub-client mode whose service is unreachable or not configured --------------------


@pytest.fixture
def client_mode(gpuqueue_config, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "server-token")
    gpuqueue_config.update(mode="hub-client", service_url=f"http://127.0.0.1:{free_port()}/services/gpuqueue/")
    return gpuqueue_config


async def _status(jp_fetch, *parts, **kw):
    try:
        r = await jp_fetch(*API, *parts, **kw)
    except HTTPClientError as e:
        r = e.response
    return r.code, json.loads(r.body or b"null")


async def test_client_mode_says_the_service_is_unreachable(client_mode, jp_fetch, jp_ws_fetch, jp_serverapp):
    assert jp_serverapp.web_app.settings["gpuqueue_service"] is None  # no queue of its own
    for parts, method, body in [(("info",), "GET", None), (("workloads",), "POST", "{}"),
                                (("workloads", "team-a", "x"), "DELETE", None), (("no", "such"), "GET", None)]:
        code, err = await _status(jp_fetch, *parts, method=method, body=body)
        assert code == 502, (parts, code, err)
        assert err["reason"] == "BadGateway" and err["field"] == "service_url"
        assert "cannot be reached" in err["message"]
    with pytest.raises(HTTPClientError) as e:
        await jp_ws_fetch(*API, "events")
    assert e.value.code == 502


@pytest.fixture
def client_mode_without_url(gpuqueue_config, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "server-token")
    monkeypatch.delenv("GPUQUEUE_SERVICE_URL", raising=False)
    gpuqueue_config.update(mode="hub-client")
    return gpuqueue_config


async def test_client_mode_without_a_service_url_is_503(client_mode_without_url, jp_fetch):
    code, err = await _status(jp_fetch, "info")
    assert code == 503 and "service_url" in err["message"], err


async def test_standalone_info_grants_both_scopes(jp_fetch, started):
    code, info = await _status(jp_fetch, "info")
    assert code == 200 and info["mode"] == "standalone"
    assert info["permissions"] == {"submit": True, "admin": True}
