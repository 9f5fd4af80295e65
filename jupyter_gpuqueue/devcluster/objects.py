"""Objects in the development cluster: server-side apply, CRDs, namespaces, service accounts.

:class:`ClusterObjects` is a mixin of :class:`.controlplane.ControlPlane`; it needs from its host
``kube`` (an admin ``KubeClient``), ``_admin_client`` (a ``kubernetes.client.ApiClient``),
``workdir``, ``url``, ``ca_file`` and ``controllers``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterable

import yaml

from . import pki


class ClusterObjects:
    """Create and wait for API objects as the cluster admin."""

    _dynamic = None

    def service_account(self, namespace: str, name: str, rules: Any,
                        expiration_seconds: int = 86400) -> tuple[str, Path]:
        """Create (or update) ServiceAccount ``namespace/name``, a ClusterRole
        ``gpuqueue-dev:<namespace>:<name>`` with ``rules`` and a ClusterRoleBinding to it; mint a
        token with the TokenRequest API. ``rules``: a list of PolicyRule dicts, a ClusterRole
        dict, or YAML text of either. Returns ``(token, kubeconfig path)``."""
        if isinstance(rules, str):
            rules = yaml.safe_load(rules)
        if isinstance(rules, dict):
            rules = rules.get("rules") or []
        self.ensure_namespace(namespace)
        role = f"gpuqueue-dev:{namespace}:{name}"
        self.apply([
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": name, "namespace": namespace}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": role}, "rules": list(rules)},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": role},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": role},
             "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
        ])
        tr = self.kube.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": int(expiration_seconds)}},
        )
        token = tr["status"]["token"]
        path = pki.write_kubeconfig(self.workdir / f"sa-{namespace}-{name}.kubeconfig", self.url,
                                    self.ca_file, token=token, user=f"{namespace}:{name}")
        return token, path

    def service_account_client(self, namespace: str, name: str, rules: Any):
        """:meth:`service_account`, then a ``kubernetes.client.ApiClient`` authenticating with
        its bearer token (CA verified). Its kubeconfig path is ``client.kubeconfig_path``."""
        from kubernetes import config

        _token, path = self.service_account(namespace, name, rules)
        client = config.new_client_from_config(config_file=str(path))
        client.kubeconfig_path = str(path)
        return client

    # -- objects ----------------------------------------------------------------------------------
    def _dyn(self):
        if self._dynamic is None:
            from kubernetes.dynamic import DynamicClient

            self._admin()
            self._dynamic = DynamicClient(self._admin_client)
        return self._dynamic

    def apply(self, docs: Any, field_manager: str = "gpuqueue-devcluster") -> list[dict]:
        """Server-side apply one object or many: a dict, a list of dicts, YAML text (multi-doc)
        or a path to a YAML file. Objects of kinds the API server does not know yet (e.g. just
        installed CRDs) are retried after refreshing discovery. Returns the applied objects."""
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        out = []
        for doc in _documents(docs):
            dyn = self._dyn()
            for attempt in range(20):
                try:
                    res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
                    break
                except ResourceNotFoundError:
                    if attempt == 19:
                        raise
                    time.sleep(0.25)
                    dyn.resources.invalidate_cache()
            md = doc.get("metadata") or {}
            ns = md.get("namespace") if res.namespaced else None
            if res.namespaced and not ns:
                ns = "default"
            obj = res.server_side_apply(body=doc, name=md["name"], namespace=ns,
                                        field_manager=field_manager, force_conflicts=True)
            out.append(obj.to_dict())
        return out

    def install_crds(self, path: str | os.PathLike, timeout: float = 30.0) -> list[str]:
        """Apply every CustomResourceDefinition in ``path`` (a YAML file or a folder of
        ``*.yaml``) and wait until each is ``Established``. Returns the CRD names. Raises
        TimeoutError."""
        p = Path(path)
        files = sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml")) if p.is_dir() else [p]
        docs = [d for f in files for d in _documents(f)
                if d.get("kind") == "CustomResourceDefinition"]
        self.apply(docs)
        names = [d["metadata"]["name"] for d in docs]
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                crd = self.kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                conds = {c["type"]: c["status"]
                         for c in (crd.get("status") or {}).get("conditions") or []}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {name} not Established after {timeout} s")
                time.sleep(0.1)
        self._dyn().resources.invalidate_cache()
        return names

    def ensure_namespace(self, name: str, labels: dict[str, str] | None = None,
                         timeout: float = 30.0) -> None:
        """Create (or update the labels of) namespace ``name`` and wait until its ``default``
        ServiceAccount exists (the API server refuses Pods before that). Raises TimeoutError."""
        md: dict = {"name": name}
        if labels:
            md["labels"] = dict(labels)
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": md})
        if not self.controllers:
            return
        from ..backends.k8s_client import KubeApiError

        deadline = time.monotonic() + timeout
        while True:
            try:
                self.kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
                return
            except KubeApiError as e:
                if e.status != 404:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {name}: no default ServiceAccount after {timeout} s")
            time.sleep(0.05)


def _documents(docs: Any) -> Iterable[dict]:
    """Dicts from a dict, a list, YAML text or a YAML file path (``List`` kinds flattened)."""
    if isinstance(docs, (str, os.PathLike)) and not (isinstance(docs, str) and "\n" in docs) \
            and Path(docs).is_file():
        docs = Path(docs).read_text()
    if isinstance(docs, str):
        docs = list(yaml.safe_load_all(docs))
    if isinstance(docs, dict):
        docs = [docs]
    for d in docs:
        if not d:
            continue
        if d.get("kind", "").endswith("List") and "items" in d:
            yield from d["items"]
        else:
            yield d
