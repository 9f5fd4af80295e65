"""Names and identifiers of submissions: workload uids, generated names (``<command>-<6 hex>``),
DNS-1123 checks of chosen names, and the executable lookup of submission checks.

Callers use them through the module (``names.random_hex(6)``), so that a test can replace one."""

from __future__ import annotations

import os
import random
import re
import secrets
import shutil
import time
import uuid as uuidlib
from typing import Optional

from ..engine.manifests import dns1123_label_errors
from ..errors import ValidationError

_rng = random.Random(secrets.randbits(128))
if hasattr(os, "register_at_fork"):  # a forked server must not repeat its parent's uids
    os.register_at_fork(after_in_child=lambda: _rng.seed(secrets.randbits(128)))
_WHICH_TTL = 5.0  # seconds a found executable is remembered (submission validation only)
_which_cache: dict[tuple[str, str], tuple[float, str]] = {}


def dns_label(value: str, field: str) -> str:
    """``value`` if it is a DNS-1123 label; ValidationError naming ``field`` otherwise."""
    if not isinstance(value, str):
        raise ValidationError("must be a string", field)
    errors = dns1123_label_errors(value)
    if errors:
        raise ValidationError(f"Invalid value: {value!r}: " + "; ".join(errors), field)
    return value


def new_uid() -> str:
    """A random (version 4) UUID. Identifiers are not secrets: drawn from a PRNG seeded from the
    OS, since os.urandom costs ~70 µs per call on the benchmark VM and a submission drew three."""
    return str(uuidlib.UUID(int=_rng.getrandbits(128), version=4))


def random_hex(digits: int) -> str:
    return f"{_rng.getrandbits(4 * digits):0{digits}x}"


def which(exe: str) -> Optional[str]:
    """``shutil.which(exe)``, remembered for a few seconds per PATH (a burst of submissions of the
    same command stats every PATH entry once, not once each; the backend resolves it again when
    the job starts)."""
    key = (exe, os.environ.get("PATH", ""))
    now = time.monotonic()
    hit = _which_cache.get(key)
    if hit is not None and now - hit[0] < _WHICH_TTL:
        return hit[1]
    found = shutil.which(exe)
    if found is not None:
        _which_cache[key] = (now, found)
    return found


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    s = re.sub(r"-+", "-", s)[:40].strip("-")
    return s or "job"
