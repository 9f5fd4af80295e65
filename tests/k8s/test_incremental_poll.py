"""The Kubernetes backend's poll looks again only at the runs whose Job or Pods moved (the
informers' label index), and at every run once per ``sweep_interval``, after a list, and soon after
a Node changed (issue 33: ``bench k8s --backlog`` spent most of the queue's loop re-reading 2,000
idle runs on every watch event)."""

from __future__ import annotations

from jupyter_gpuqueue.backends.k8s_client import KubeClient
from jupyter_gpuqueue.backends.k8s_informer import Informer
from jupyter_gpuqueue.backends.k8s_jobs import UID_LABEL
from jupyter_gpuqueue.backends.k8s_status import JobRun
from jupyter_gpuqueue.backends.kubernetes import KubernetesBackend


class _Lists(KubeClient):
    """Answers lists from ``items`` (path -> objects); nothing else is asked in these tests."""

    def __init__(self):
        self.items: dict[str, list[dict]] = {}
        self.counts: dict = {}

    def list(self, path, label_selector=None, field_selector=None):
        return list(self.items.get(path, [])), "1"


def _obj(name, uid, rv="1", **extra):
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv,
                         "labels": {UID_LABEL: uid}}, **extra}


def test_the_informer_indexes_by_label_and_says_what_changed():
    client = _Lists()
    client.items["/p"] = [_obj("a-0", "a"), _obj("b-0", "b")]
    inf = Informer(client, "/p", index_label=UID_LABEL)
    inf._relist()
    assert inf.take_changed() is None  # listed: everything may have changed
    assert [p["metadata"]["name"] for p in inf.by_label("a")] == ["a-0"]
    assert inf.take_changed() == set()
    inf._apply({"type": "ADDED", "object": _obj("a-1", "a", "2")})
    inf._apply({"type": "MODIFIED", "object": _obj("b-0", "b", "3")})
    assert sorted(p["metadata"]["name"] for p in inf.by_label("a")) == ["a-0", "a-1"]
    assert inf.take_changed() == {"a", "b"}
    inf._apply({"type": "DELETED", "object": _obj("b-0", "b", "4")})
    assert inf.by_label("b") == [] and inf.take_changed() == {"b"}
    inf._apply({"type": "MODIFIED", "object": _obj("a-0", "c", "5")})  # its label changed
    assert [p["metadata"]["name"] for p in inf.by_label("c")] == ["a-0"]
    assert [p["metadata"]["name"] for p in inf.by_label("a")] == ["a-1"]
    assert inf.take_changed() == {"a", "c"}
    inf._relist()
    assert inf.take_changed() is None and inf.by_label("c") == [] and len(inf.by_label("a")) == 1


def test_poll_looks_at_the_runs_that_moved_and_at_every_run_once_per_sweep():
    now = [1000.0]
    client = _Lists()
    be = KubernetesBackend(client, start_informers=False, check_access=False, clock=lambda: now[0])
    for inf in (be.jobs, be.pods):
        inf._relist()
    for uid in ("a", "b", "c"):
        be._runs[uid] = JobRun(uid=uid, namespace="ns", name=uid, seen=True, since=now[0])
    looked: list[str] = []
    be._observe = lambda run, job, pods, t: looked.append(run.uid) or []

    def poll():
        looked.clear()
        be.poll()
        return sorted(looked)

    assert poll() == ["a", "b", "c"]  # the first poll after the lists: a sweep
    now[0] += 0.1
    assert poll() == []  # nothing moved
    be.pods._apply({"type": "ADDED", "object": _obj("b-0", "b", "2")})
    now[0] += 0.1
    assert poll() == ["b"]
    be._runs["d"] = JobRun(uid="d", namespace="ns", name="d", seen=True, since=now[0])  # adopted
    be.jobs._apply({"type": "DELETED", "object": _obj("c", "c", "3")})
    now[0] += 0.1
    assert poll() == ["c", "d"]
    now[0] += be.sweep_interval
    assert poll() == ["a", "b", "c", "d"]  # time passes (PodsReady timeouts): every run again
    now[0] += 0.1
    be._nodes_changed()  # which Pods are lost depends on every Node
    assert poll() == []  # not at once: at most four sweeps per interval
    now[0] += be.sweep_interval / 4
    assert poll() == ["a", "b", "c", "d"]
    now[0] += 0.1
    be.pods._relist()  # a list (after 410 Gone): every run
    assert poll() == ["a", "b", "c", "d"]
