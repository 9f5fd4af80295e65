"""What the queue's service account must be allowed to do, and a start-up check that asks the API
server, verb by verb, whether it is (``SelfSubjectAccessReview``, ``authorization.k8s.io/v1``:
every authenticated user may create one; the answer is the authorizer's, RBAC or any other).

:data:`CLUSTER_ROLE_RULES` is the ClusterRole of docs/kubernetes.md's *RBAC* section, rule for rule
(a unit test reads the page and compares), each rule tagged with the backends that need it.
:func:`missing_permissions` returns what is missing as ``"<verb> <resource>"`` strings, e.g.
``"update batch/jobs/status"``, so that the service can log and show them (``GET /info``:
``clusterAccess``) before any job trips over them.
"""

from __future__ import annotations

import logging
from typing import Iterable, Optional

from .k8s_client import KubeApiError, KubeClient

log = logging.getLogger(__name__)

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

# (apiGroup, resources, verbs, which backends need it: "kubernetes", "kueue", "volcano")
CLUSTER_ROLE_RULES: list[tuple[str, tuple[str, ...], tuple[str, ...], frozenset]] = [
    ("batch", ("jobs",), ("get", "list", "watch", "create", "update", "patch", "delete"),
     frozenset({"kubernetes", "kueue"})),
    ("batch", ("jobs/status",), ("get", "update", "patch"), frozenset({"kubernetes", "kueue"})),
    ("", ("pods",), ("get", "list", "watch"), frozenset({"kubernetes", "kueue"})),
    ("", ("pods/log",), ("get",), frozenset({"kubernetes", "kueue"})),
    ("", ("events",), ("get", "list", "watch"), frozenset({"kubernetes", "kueue"})),
    ("", ("nodes",), ("get", "list", "watch"), frozenset({"kubernetes", "kueue"})),
    ("scheduling.k8s.io", ("priorityclasses",), ("get", "list", "watch"), frozenset({"kubernetes", "kueue"})),
    ("scheduling.volcano.sh", ("podgroups",), ("get", "create", "delete"), frozenset({"volcano"})),
    ("kueue.x-k8s.io", ("workloads",), ("get", "list", "watch"), frozenset({"kueue"})),
    ("visibility.kueue.x-k8s.io", ("localqueues/pendingworkloads", "clusterqueues/pendingworkloads"), ("get",),
     frozenset({"kueue"})),
]


def required(kinds: Iterable[str]) -> list[tuple[str, str, str]]:
    """``(group, resource, verb)`` for every verb the backends ``kinds`` need (resource may name a
    subresource: ``jobs/status``)."""
    want = set(kinds)
    return [(g, r, v) for g, resources, verbs, need in CLUSTER_ROLE_RULES if need & want
            for r in resources for v in verbs]


def describe(group: str, resource: str, verb: str) -> str:
    """``"update batch/jobs/status"``; the core group is left out: ``"get pods/log"``."""
    return f"{verb} {group + '/' if group else ''}{resource}"


def missing_permissions(client: KubeClient, kinds: Iterable[str]) -> list[str]:
    """Ask the API server about each permission :func:`required` lists, cluster-wide (no
    namespace: the watches and the inventory are cluster-wide). Returns the denied ones
    (:func:`describe`), in the role's order; empty when all are allowed. Raises KubeApiError
    when the API server cannot answer (the caller logs it; nothing is concluded)."""
    out = []
    for group, resource, verb in required(kinds):
        res, _, sub = resource.partition("/")
        attrs = {"group": group, "resource": res, "verb": verb}
        if sub:
            attrs["subresource"] = sub
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}}
        answer = client.create(SSAR_PATH, body)
        if not (answer.get("status") or {}).get("allowed"):
            out.append(describe(group, resource, verb))
    return out


def forbidden_what(err: KubeApiError) -> Optional[str]:
    """From a 403's message (``... cannot update resource "jobs/status" in API group "batch" ...``,
    the RBAC authorizer's wording) the denied ``"<verb> <group>/<resource>"``; None when the
    message does not say."""
    import re

    m = re.search(r'cannot (\w+) resource "([^"]+)"(?: in API group "([^"]*)")?', err.message or "")
    if not m:
        return None
    return describe(m.group(3) or "", m.group(2), m.group(1))
