"""Certificates and kubeconfigs for the development control plane (``cryptography``).

:func:`make_pki` writes into one folder (PEM files, keys unencrypted, mode 0600):

=============================  ==========================================================
``ca.crt`` / ``ca.key``        the cluster CA (signs everything below; the client CA too)
``apiserver.crt/.key``         serving cert: 127.0.0.1, localhost, kubernetes.default(.svc…),
                               the service IP 10.0.0.1
``sa.key`` / ``sa.pub``        service-account token signing key pair (RSA 2048)
``admin.crt/.key``             ``CN=admin, O=system:masters``
``controller-manager.crt/.key`` ``CN=system:kube-controller-manager``
``scheduler.crt/.key``         ``CN=system:kube-scheduler``
``apiserver-kubelet-client.*`` the API server's client cert towards kubelets
                               (``CN=kube-apiserver-kubelet-client, O=system:masters``)
``kubelet.crt/.key``           serving cert of the node stand-in's kubelet endpoint (127.0.0.1)
=============================  ==========================================================

and :func:`write_kubeconfig` writes a kubeconfig for a client cert or a bearer token.
Keys are EC P-256 except the service-account key (RSA, the API server's default RS256).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_IP = "10.0.0.1"


@dataclass(frozen=True)
class Pki:
    """Paths of the files :func:`make_pki` wrote (all absolute)."""

    dir: Path
    ca_crt: Path
    ca_key: Path
    apiserver_crt: Path
    apiserver_key: Path
    sa_key: Path
    sa_pub: Path
    admin_crt: Path
    admin_key: Path
    controller_manager_crt: Path
    controller_manager_key: Path
    scheduler_crt: Path
    scheduler_key: Path
    kubelet_client_crt: Path
    kubelet_client_key: Path
    kubelet_crt: Path
    kubelet_key: Path


def _write(path: Path, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _cert(subject, pub, issuer, signer, *, ca=False, server=False, client=False, sans=()):
    now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=5)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(pub)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(pub), critical=False)
    else:
        b = b.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_encipherment=True, key_cert_sign=False,
                crl_sign=False, content_commitment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        alt = []
        for s in sans:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(s)))
            except ValueError:
                alt.append(x509.DNSName(s))
        b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return b.sign(signer, hashes.SHA256())


def make_pki(directory: str | os.PathLike) -> Pki:
    """Create the CA and every certificate/key listed in the module docstring under
    ``directory`` (created if needed). Takes ~0.2 s (one RSA key). Returns their paths."""
    d = Path(directory).resolve()
    d.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("gpuqueue-devcluster-ca")
    ca = _cert(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True)
    _write(d / "ca.crt", ca.public_bytes(serialization.Encoding.PEM))
    _write(d / "ca.key", _key_pem(ca_key), private=True)

    def leaf(stem, cn, orgs=(), *, server=False, client=False, sans=()):
        k = ec.generate_private_key(ec.SECP256R1())
        c = _cert(_name(cn, orgs), k.public_key(), ca_name, ca_key,
                  server=server, client=client, sans=sans)
        _write(d / f"{stem}.crt", c.public_bytes(serialization.Encoding.PEM))
        _write(d / f"{stem}.key", _key_pem(k), private=True)
        return d / f"{stem}.crt", d / f"{stem}.key"

    api = leaf(
        "apiserver", "kube-apiserver", server=True,
        sans=("127.0.0.1", "localhost", SERVICE_IP, "kubernetes", "kubernetes.default",
              "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
    )
    admin = leaf("admin", "admin", ("system:masters",), client=True)
    kcm = leaf("controller-manager", "system:kube-controller-manager", client=True)
    sched = leaf("scheduler", "system:kube-scheduler", client=True)
    kclient = leaf("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                   ("system:masters",), client=True)
    kubelet = leaf("kubelet", "gpuqueue-node-standin", server=True,
                   sans=("127.0.0.1", "localhost"))

    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(d / "sa.key", _key_pem(sa), private=True)
    _write(d / "sa.pub", sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return Pki(
        dir=d, ca_crt=d / "ca.crt", ca_key=d / "ca.key",
        apiserver_crt=api[0], apiserver_key=api[1],
        sa_key=d / "sa.key", sa_pub=d / "sa.pub",
        admin_crt=admin[0], admin_key=admin[1],
        controller_manager_crt=kcm[0], controller_manager_key=kcm[1],
        scheduler_crt=sched[0], scheduler_key=sched[1],
        kubelet_client_crt=kclient[0], kubelet_client_key=kclient[1],
        kubelet_crt=kubelet[0], kubelet_key=kubelet[1],
    )


def write_kubeconfig(path: str | os.PathLike, server: str, ca_crt: Path, *,
                     client_crt: Path | None = None, client_key: Path | None = None,
                     token: str | None = None, user: str = "user") -> Path:
    """Write a one-context kubeconfig for ``server`` (``https://127.0.0.1:PORT``) trusting
    ``ca_crt``, authenticating with a client cert/key pair or a bearer ``token``."""
    u: dict = {}
    if client_crt is not None:
        u["client-certificate"] = str(client_crt)
        u["client-key"] = str(client_key)
    if token is not None:
        u["token"] = token
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dev", "cluster": {"server": server,
                                                  "certificate-authority": str(ca_crt)}}],
        "users": [{"name": user, "user": u}],
        "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": user}}],
        "current-context": "dev",
    }
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    return p
