"""Errors raised by the engine (no I/O, no HTTP: callers map them)."""

from __future__ import annotations

from typing import Optional


class ManifestError(ValueError):
    """A manifest that Kueue's CRD schema or admission webhooks would reject.

    Attributes: ``source`` (file name or ``<stdin>``), ``index`` (0-based document index in a
    multi-document stream), ``kind``/``name`` of the object, ``field`` (a Kubernetes field path
    such as ``spec.resourceGroups[0].flavors[1].resources[0].name``) and ``reason``.
    ``str()`` gives all of it on one line.
    """

    def __init__(
        self,
        reason: str,
        field: Optional[str] = None,
        *,
        source: Optional[str] = None,
        index: Optional[int] = None,
        kind: Optional[str] = None,
        name: Optional[str] = None,
    ):
        self.reason = reason
        self.field = field
        self.source = source
        self.index = index
        self.kind = kind
        self.name = name
        super().__init__(str(self))

    def located(self, *, source=None, index=None, kind=None, name=None) -> "ManifestError":
        """Fill in where the error is, keeping what is already known."""
        self.source = self.source if self.source is not None else source
        self.index = self.index if self.index is not None else index
        self.kind = self.kind or kind
        self.name = self.name or name
        self.args = (str(self),)
        return self

    def __str__(self) -> str:
        where = []
        if self.source is not None:
            where.append(self.source)
        if self.index is not None:
            where.append(f"document {self.index}")
        if self.kind:
            where.append(f"{self.kind}/{self.name}" if self.name else self.kind)
        prefix = ": ".join(where)
        body = f"{self.field}: {self.reason}" if self.field else self.reason
        return f"{prefix}: {body}" if prefix else body
