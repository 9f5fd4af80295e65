"""Errors that cross layers. Each maps to one HTTP status, a CLI exit code 2, or a widget error.

Every error names the offending ``field`` (a JSON path such as ``podSets[0].count`` or a form field
such as ``gpus``) where there is one, so that users see *what* is wrong and *why*.
"""

from __future__ import annotations

import math
from typing import Optional


class GpuQueueError(Exception):
    """Base class. ``status`` is the HTTP status the REST API answers with."""

    status = 400
    reason = "BadRequest"

    def __init__(self, message: str, field: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.field = field

    def to_json(self) -> dict:
        out = {"message": self.message, "reason": self.reason}
        if self.field is not None:
            out["field"] = self.field
        return out

    def __str__(self) -> str:
        if self.field and self.field not in self.message:
            return f"{self.field}: {self.message}"
        return self.message


class ValidationError(GpuQueueError):
    status = 400
    reason = "Invalid"


class NotFound(GpuQueueError):
    status = 404
    reason = "NotFound"


class Forbidden(GpuQueueError):
    status = 403
    reason = "Forbidden"


class Conflict(GpuQueueError):
    status = 409
    reason = "Conflict"


class PayloadTooLarge(GpuQueueError):
    status = 413
    reason = "PayloadTooLarge"


class TooManyRequests(GpuQueueError):
    """429: a per-user limit was hit (``submit_rate_limit``, ``max_pending_per_user``). The
    message names the limit and its configured value; ``retry_after`` is the number of seconds
    (float, > 0) after which the same request may succeed; :attr:`retry_after_seconds` is that
    rounded up to whole seconds (at least 1), sent as the ``Retry-After`` header and as
    ``retryAfter`` in the JSON body."""

    status = 429
    reason = "TooManyRequests"

    def __init__(self, message: str, field: Optional[str] = None, retry_after: Optional[float] = None):
        super().__init__(message, field)
        self.retry_after = retry_after

    @property
    def retry_after_seconds(self) -> int:
        return max(1, math.ceil(self.retry_after or 1))

    def to_json(self) -> dict:
        out = super().to_json()
        out["retryAfter"] = self.retry_after_seconds
        return out


def error_class_for_status(status: int) -> type[GpuQueueError] | None:
    """The error class the REST API answers with ``status`` (None if no class of this module does)."""
    for cls in (ValidationError, Forbidden, NotFound, Conflict, PayloadTooLarge, TooManyRequests):
        if cls.status == status:
            return cls
    return None
