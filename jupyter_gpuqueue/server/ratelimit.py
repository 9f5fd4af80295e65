"""Per-user request-rate limits of the REST API (a server rule; the cap on pending workloads per
user is a queue rule and lives in ``QueueService.max_pending_per_user``).

``c.GpuQueueApp.submit_rate_limit = "20/s"`` gives every user a token bucket for submissions
(``POST workloads``): it holds ``submit_rate_burst`` tokens (default: the rate's count, here 20),
refills at 20 tokens per second, and each workload submitted takes one, however it came: a form
submission one, a batch of N items N, a manifest one per workload in it. A submission finding the
bucket short of its tokens is answered **429** ``TooManyRequests`` with ``Retry-After`` (whole
seconds until they are back) and a message naming the limit; it changes nothing. A request that
queues nothing (refused as invalid, 400, or as forbidden, conflicting or over the pending cap)
costs nothing: its tokens are given back (:meth:`TokenBucketLimiter.give_back`). Buckets are per
user name and live in memory (a restart refills them).

Rates are ``"<count>/<unit>"`` with unit ``s`` / ``sec`` / ``second``, ``m`` / ``min`` /
``minute``, ``h`` / ``hour`` (optionally with a number before the unit: ``"100/10s"``). An empty
string turns the limit off.

Not thread-safe: used from the server's event-loop thread, like the handlers that call it.
"""

from __future__ import annotations

import re
import time
from typing import Callable, Optional

from ..errors import TooManyRequests, ValidationError

_UNITS = {
    "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")


def parse_rate(text: str, field: str = "submit_rate_limit") -> Optional[tuple[float, float]]:
    """``"20/s"`` → ``(20.0, 1.0)``: (count, per seconds). None for an empty string (no limit).

    Raises ValidationError(field) for anything else, naming the accepted form."""
    if text is None or not str(text).strip():
        return None
    m = _RATE.match(str(text).lower())
    if not m or m.group(3) not in _UNITS:
        raise ValidationError(
            f"{text!r} is not a rate like '20/s', '600/min' or '100/10s' (units: s, min, h)", field)
    count = float(m.group(1))
    per = float(m.group(2) or 1.0) * _UNITS[m.group(3)]
    if count <= 0 or per <= 0:
        raise ValidationError(f"{text!r}: the count and the period must be > 0", field)
    return count, per


class TokenBucketLimiter:
    """One token bucket per key (user name).

    ``rate``: the configured text (for messages), ``count`` tokens per ``per`` seconds, ``burst``
    the bucket's capacity in tokens (≥ 1; default ``count``). ``clock``: monotonic seconds.
    """

    def __init__(self, rate: str, count: float, per: float, burst: Optional[float] = None,
                 *, what: str = "submissions", setting: str = "submit_rate_limit",
                 clock: Callable[[], float] = time.monotonic):
        self.rate_text = rate
        self.refill_per_second = count / per
        self.burst = float(burst) if burst else float(count)
        if self.burst < 1:
            raise ValidationError("the burst must be at least 1 request", "submit_rate_burst")
        self.what = what
        self.setting = setting
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    @classmethod
    def from_setting(cls, rate: str, burst: int = 0, **kw) -> Optional["TokenBucketLimiter"]:
        """A limiter for the setting ``rate`` (see :func:`parse_rate`), or None when it is empty.
        ``burst`` 0: the rate's count. Raises ValidationError naming the setting."""
        parsed = parse_rate(rate, kw.get("setting", "submit_rate_limit"))
        if parsed is None:
            return None
        if burst < 0:
            raise ValidationError("must be ≥ 0 (0: the rate's count)", "submit_rate_burst")
        return cls(rate, parsed[0], parsed[1], burst or None, **kw)

    def take(self, key: str, n: int = 1, field: str = "items") -> None:
        """Take ``n`` tokens (a batch of ``n`` submissions) from ``key``'s bucket, or raise
        TooManyRequests (429) with ``retry_after`` = seconds until they are back, the message
        naming the limit; nothing is taken then. ValidationError (``field``: ``items`` of a batch,
        ``manifest`` of a manifest) when ``n`` is above the burst: such a request could never pass."""
        if n > self.burst:
            raise ValidationError(
                f"a batch of {n} {self.what} is above the per-user burst of {self.burst:g} "
                f"(c.GpuQueueApp.{self.setting}); send at most {self.burst:g} per request", field)
        now = self.clock()
        tokens, at = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.refill_per_second)
        if tokens < n:
            self._buckets[key] = (tokens, now)
            wait = (n - tokens) / self.refill_per_second
            raise TooManyRequests(
                f"too many {self.what} from {key}: the limit is {self.rate_text} per user "
                f"(burst {self.burst:g}, c.GpuQueueApp.{self.setting}); retry in {wait:.2f} s",
                None, retry_after=wait)
        self._buckets[key] = (tokens - n, now)
        if len(self._buckets) > 4096:
            self._prune(now)

    def give_back(self, key: str, n: int = 1) -> None:
        """Return ``n`` tokens taken by :meth:`take` for a request that queued fewer workloads than
        it reserved (refused: none; a manifest whose documents were not all workloads: the rest).
        The bucket never holds more than its burst."""
        if n <= 0 or key not in self._buckets:
            return
        now = self.clock()
        tokens, at = self._buckets[key]
        tokens = min(self.burst, tokens + (now - at) * self.refill_per_second + n)
        self._buckets[key] = (tokens, now)

    def _prune(self, now: float) -> None:
        """Forget buckets that have refilled completely (they equal a new one)."""
        full = [k for k, (t, at) in self._buckets.items()
                if t + (now - at) * self.refill_per_second >= self.burst]
        for k in full:
            del self._buckets[k]
