"""Fixtures: a fake API server over real HTTP (``fake_apiserver.py``) and helpers to wait for the
backend's watch threads."""

from __future__ import annotations

import time

import pytest

from .fake_apiserver import FakeApiServer, FakeCluster


@pytest.fixture
def cluster() -> FakeCluster:
    c = FakeCluster()
    for ns in ("team-a", "team-b", "one", "two"):
        c.add_namespace(ns)
    for name, value in (("low", 100), ("high", 1000), ("development", 10)):
        c.add_priority_class(name, value)  # the PriorityClasses the tests' queue configurations name
    return c


@pytest.fixture
def apiserver(cluster):
    srv = FakeApiServer(cluster).start()
    yield srv
    srv.stop()


def wait_for(predicate, timeout: float = 5.0, step=None, interval: float = 0.01, what: str = ""):
    """Call ``step()`` (if given) and ``predicate()`` until it returns a truthy value; return it.
    Raises AssertionError after ``timeout`` seconds, naming ``what`` (or the predicate)."""
    deadline = time.monotonic() + timeout
    while True:
        if step is not None:
            step()
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for "
                                 f"{what or getattr(predicate, '__name__', predicate)}")
        time.sleep(interval)
