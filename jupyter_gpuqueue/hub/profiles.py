"""From a spawner's profile to a lease request, and from a lease to the spawn page's words.

Pure functions of plain data (profile dicts, Workload views as docs/rest-api.md shapes them).
"""

from __future__ import annotations

import copy
import time
from typing import Any, Optional

from .config import REQUEST_KEYS, setting


def _flavor_label(flavor: Optional[str]) -> str:
    if not flavor or flavor == "any":
        return "GPU"
    name = flavor[len("nvidia-"):] if flavor.startswith("nvidia-") else flavor
    return name.upper()


def describe_request(request: dict) -> str:
    """``"1 × A100"``, ``"2 × GPU"``, ``"1 × MIG 1g.10gb"`` for a lease request."""
    if request.get("migProfile"):
        return f"1 × MIG {request['migProfile']}"
    return f"{int(request.get('gpus') or 1)} × {_flavor_label(request.get('flavor'))}"


def request_from_profile(profile: dict) -> Optional[dict]:
    """The lease request of one ``profile_list`` entry, or None for a profile without a GPU.

    Read from the entry's ``"gpuqueue"`` key (``{"gpus": 1, "flavor": "nvidia-a100"}``,
    ``{"migProfile": "1g.10gb"}``, optionally ``localQueue``, ``priorityClass``,
    ``maxRuntimeSeconds``), else derived from ``kubespawner_override.extra_resource_limits``
    (``nvidia.com/gpu`` → ``gpus``; ``nvidia.com/mig-<profile>`` → ``migProfile``) and the
    override's ``node_selector`` is not consulted (the queue chooses the flavor). Raises ValueError
    naming the key for a malformed entry."""
    explicit = profile.get("gpuqueue")
    if explicit is not None:
        if not isinstance(explicit, dict):
            raise ValueError(f"profile {profile.get('slug')!r}: 'gpuqueue' must be a mapping")
        unknown = sorted(set(explicit) - set(REQUEST_KEYS))
        if unknown:
            raise ValueError(f"profile {profile.get('slug')!r}: unknown gpuqueue key(s) {', '.join(unknown)}")
        return dict(explicit) if explicit else None
    limits = ((profile.get("kubespawner_override") or {}).get("extra_resource_limits") or {})
    for resource, qty in limits.items():
        if resource.startswith("nvidia.com/mig-"):
            return {"migProfile": resource[len("nvidia.com/mig-"):]}
        if resource == "nvidia.com/gpu":
            try:
                gpus = int(str(qty))
            except ValueError:
                raise ValueError(f"profile {profile.get('slug')!r}: nvidia.com/gpu limit {qty!r} is not a whole number") from None
            return {"gpus": gpus} if gpus > 0 else None
    return None


def _merge(target: dict, new: dict) -> None:
    """``new`` into ``target`` as KubeSpawner merges overrides (``kubespawner.utils.
    recursive_update``): mappings merged key by key, a None value removes the key, anything else
    replaces."""
    for k, v in new.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


def _format(value: Any, text: str) -> Any:
    """``value`` with ``{value}`` replaced by ``text`` in every string it holds (KubeSpawner's
    ``recursive_format`` for an ``unlisted_choice``)."""
    if isinstance(value, str):
        return value.format(value=text)
    if isinstance(value, dict):
        return {_format(k, text): _format(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [_format(v, text) for v in value]
    return value


def _option_value(user_options: dict, key: str) -> Optional[str]:
    value = user_options.get(key)
    if isinstance(value, list):  # an unprocessed form value
        value = value[0] if value else None
    return value or None


def apply_profile_options(profile: dict, user_options: dict) -> dict:
    """``profile`` with the choices of its ``profile_options`` applied as KubeSpawner 7 applies
    them (``KubeSpawner._load_profile``): for each option, in order, the override of the choice in
    ``user_options[option]``, of the free-form value in ``user_options[option + "--unlisted-choice"]``
    (``{value}`` formatted into its ``unlisted_choice.kubespawner_override``), or of the default
    choice (the one marked ``default``, else the first) is merged into the profile's
    ``kubespawner_override``. A choice may also carry a ``gpuqueue`` request, which then replaces
    the profile's. Returns a new dict; ``profile`` is unchanged.

    Raises ValueError naming the profile and option, as KubeSpawner refuses the spawn: an unknown
    choice, a free-form value for an option that does not enable one or that fails its
    ``validation_regex``, no choice for an option that only has a free-form field."""
    import re

    slug = profile.get("slug")
    override = copy.deepcopy(profile.get("kubespawner_override") or {})
    explicit = profile.get("gpuqueue")
    for name, option in (profile.get("profile_options") or {}).items():
        choices = option.get("choices") or {}
        unlisted = _option_value(user_options, f"{name}--unlisted-choice")
        choice = _option_value(user_options, name)
        if unlisted:
            free = option.get("unlisted_choice") or {}
            if not free.get("enabled"):
                raise ValueError(f"profile {slug!r}: option {name!r} takes no free-form value")
            regex = free.get("validation_regex")
            if regex and not re.match(regex, unlisted):
                raise ValueError(f"profile {slug!r}: {unlisted!r} does not match the {name!r} option's "
                                 f"validation_regex {regex!r}")
            chosen = {"kubespawner_override": _format(free.get("kubespawner_override") or {}, unlisted)}
        elif choice:
            if choice not in choices:
                raise ValueError(f"profile {slug!r}: unknown choice {choice!r} for option {name!r}; "
                                 f"expected one of {', '.join(choices)}")
            chosen = choices[choice]
        elif choices:
            chosen = next((c for c in choices.values() if c.get("default")), next(iter(choices.values())))
        else:
            raise ValueError(f"profile {slug!r}: option {name!r} has no default choice; give a value")
        _merge(override, chosen.get("kubespawner_override") or {})
        if chosen.get("gpuqueue") is not None:
            explicit = chosen["gpuqueue"]
    out = {**profile, "kubespawner_override": override}
    if explicit is not None:
        out["gpuqueue"] = explicit
    return out


def selected_profile(profiles: list, user_options: dict) -> Optional[dict]:
    """The profile chosen in ``user_options["profile"]`` (KubeSpawner's rule otherwise: the one
    marked ``default``, else the first). Raises ValueError for an unknown slug."""
    if not profiles:
        return None
    slug = (user_options or {}).get("profile")
    if isinstance(slug, list):  # an unprocessed form value
        slug = slug[0] if slug else None
    if slug:
        for p in profiles:
            if p.get("slug") == slug:
                return p
        raise ValueError(f"unknown profile {slug!r}")
    for p in profiles:
        if p.get("default"):
            return p
    return profiles[0]


def profile_needs_gpu(profile: dict) -> bool:
    """Whether a ``profile_list`` entry queues for a GPU: its own request, or that of any choice of
    its ``profile_options`` (raises ValueError as :func:`request_from_profile`)."""
    if request_from_profile(profile):
        return True
    for option in (profile.get("profile_options") or {}).values():
        for choice in (option.get("choices") or {}).values():
            if request_from_profile({"slug": profile.get("slug"), **{k: choice[k] for k in ("gpuqueue", "kubespawner_override") if k in choice}}):
                return True
    return False


def profiles_form(profiles: list, note: str = "", facts: Optional[dict] = None) -> str:
    """An ``options_form`` (HTML) choosing one of ``profiles`` (``slug``, ``display_name``,
    ``description``, ``default``) as ``user_options["profile"]``, for spawners without
    KubeSpawner's own profile form. ``note``: plain text shown above the choices (why GPU profiles
    are not offered, :meth:`~.spawner.GpuQueueSpawnerMixin.get_options_form`). ``facts``: what
    the spawn page says under each GPU profile (:func:`profile_facts`: ``{slug: [text, ...]}``,
    e.g. what is free now and how long a lease lasts)."""
    from html import escape

    rows = []
    if note:
        rows.append(f"<div class='alert alert-warning' role='status' id='gpuqueue-note'>{escape(note)}</div>")
    chosen = selected_profile(list(profiles), {}) if profiles else None
    for p in profiles:
        slug = escape(str(p["slug"]), quote=True)
        checked = " checked" if p is chosen else ""
        desc = f"<div class='text-muted'>{escape(str(p['description']))}</div>" if p.get("description") else ""
        lines = (facts or {}).get(p["slug"]) or []
        if lines:
            desc += (f"<div class='gpuqueue-facts' data-profile='{slug}'>"
                     + "".join(f"<div>{escape(t)}</div>" for t in lines) + "</div>")
        rows.append(
            f"<div class='radio'><label><input type='radio' name='profile' value='{slug}'{checked}> "
            f"<strong>{escape(str(p.get('display_name') or p['slug']))}</strong>{desc}</label></div>"
        )
    return "<p>Servers with a GPU wait their turn in your team's GPU queue.</p>" + "".join(rows)


def _free_text(request: dict, summary: list) -> Optional[str]:
    """``"Free now: 3 of 4 A100 GPUs"`` for a lease request, from ``GET inventory``'s summary
    (free devices on the machines, whatever the team's quota); None when no device matches."""
    if request.get("migProfile"):
        resource, what = f"nvidia.com/mig-{request['migProfile']}", f"MIG {request['migProfile']} slices"
        rows = [r for r in summary if r.get("resource") == resource]
    else:
        flavor = request.get("flavor")
        rows = [r for r in summary if r.get("resource") == "nvidia.com/gpu" and flavor in (None, "", "any", r.get("flavor"))]
        what = f"{_flavor_label(flavor)} GPUs" if flavor not in (None, "", "any") else "GPUs"
    total = sum(int(r.get("total") or 0) for r in rows)
    if not total:
        return None
    free = sum(int(r.get("free") or 0) for r in rows)
    if free == 0:
        return f"Free now: none of {total} {what} (you wait in your team's queue)"
    return f"Free now: {free} of {total} {what}"


def profile_facts(profiles: list, lease_seconds: float, inventory: Optional[dict] = None,
                  cap_seconds: Optional[float] = None) -> dict:
    """What the spawn page says under each GPU profile: ``{slug: ["Free now: 3 of 4 A100 GPUs",
    "Lease: up to 8 h; the server is stopped then (warned before)"]}``. ``lease_seconds``: the
    lease's maximum time (the profile's own ``maxRuntimeSeconds``, else this: the spawner's
    ``gpuqueue_max_runtime_seconds``); ``inventory``: ``GET inventory`` (None: nothing said of
    what is free); ``cap_seconds``: the team's cap on a run (service/runtime_caps.py), said where
    the lease would pass it. Profiles that are malformed or need no GPU get nothing."""
    summary = list((inventory or {}).get("summary") or [])
    out: dict = {}
    for p in profiles:
        try:
            request = request_from_profile(p)
        except ValueError:
            continue
        if not request:
            continue
        lines = []
        if inventory is not None:
            free = _free_text(request, summary)
            if free:
                lines.append(free)
        seconds = float(request.get("maxRuntimeSeconds") or lease_seconds or 0)
        if seconds > 0:
            lease = f"Lease: up to {_span(seconds)}; the server is stopped then (warned before)"
            if cap_seconds and seconds > cap_seconds:
                lease += f" — more than your team's maximum run time of {_span(cap_seconds)}: ask an admin"
            lines.append(lease)
        out[p["slug"]] = lines
    return out


def lease_request_for(spawner: Any) -> Optional[dict]:
    """The lease request for a spawner's next server, or None when it needs no GPU.

    Profiles come from ``spawner.profile_list`` (KubeSpawner; callables are not evaluated here:
    give such profiles a static ``gpuqueue_profiles`` instead) or ``spawner.gpuqueue_profiles``;
    with neither, ``spawner.gpuqueue_request`` (empty: no GPU). The chosen profile's
    ``profile_options`` apply (:func:`apply_profile_options`): a GPU picked in a choice queues
    as one given by the profile itself."""
    profiles = setting(spawner, "gpuqueue_profiles") or getattr(spawner, "profile_list", None) or []
    if isinstance(profiles, dict):  # KubeSpawner 7.1 accepts a dict keyed by slug
        profiles = [dict(v, slug=v.get("slug", k)) for k, v in profiles.items()]
    if callable(profiles):
        profiles = []
    user_options = getattr(spawner, "user_options", None) or {}
    profile = selected_profile(list(profiles), user_options)
    if profile is not None:
        return request_from_profile(apply_profile_options(profile, user_options))
    req = dict(setting(spawner, "gpuqueue_request") or {})
    return req or None


def _span(seconds: float) -> str:
    """``"4 min"``, ``"1 h 5 min"``, ``"3 d"``: a duration as the spawn page says it."""
    minutes = max(1, int(round(seconds / 60.0)))
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 48 * 60:
        h, m = divmod(minutes, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    return f"{int(round(minutes / 1440.0))} d"


def _range(early: float, late: float) -> str:
    """``"2–9 min"``, ``"45 min–2 h"``: the bounds of an estimate, the unit said once where shared."""
    a, b = _span(early), _span(late)
    if a.endswith(" min") and b.endswith(" min") and " h " not in a + b:
        return f"{a[:-4]}–{b}"
    return f"{a}–{b}"


def estimate_text(workload: dict, now: Optional[float] = None) -> str:
    """What the queue expects of a pending lease, from its view's ``estimatedStartAt`` (epoch
    seconds or None), ``estimatedStartRange`` (``{"early", "late"}`` epoch seconds, or None),
    ``estimateReason`` and ``estimateMessage``: ``"expected in ~4 min (2–9 min)"``,
    ``"expected any moment now"``, ``"no estimate yet"``, or ``"no estimate: <why>"``. ``now``:
    epoch seconds (default: the clock)."""
    now = time.time() if now is None else float(now)
    at = workload.get("estimatedStartAt")
    if isinstance(at, (int, float)):
        wait = float(at) - now
        if wait < 30:
            text = "expected any moment now"
        else:
            text = f"expected in ~{_span(wait)}"
        rng = workload.get("estimatedStartRange")
        if isinstance(rng, dict) and isinstance(rng.get("early"), (int, float)) and isinstance(rng.get("late"), (int, float)):
            early, late = max(0.0, float(rng["early"]) - now), max(0.0, float(rng["late"]) - now)
            if late >= 60 and _span(early) != _span(late):
                text += f" ({_range(early, late)})"
        return text
    reason = workload.get("estimateReason")
    if not reason or reason == "NotYetEstimated":
        return "no estimate yet"
    why = workload.get("estimateMessage") or reason
    return f"no estimate: {why}"


def waiting_for_text(workload: dict, now: Optional[float] = None) -> str:
    """The first workload a pending lease waits for (``waitingFor`` of its view): ``"after
    team-b/train-x (2 × nvidia-a100, ends in ~3 min)"``, ``"+ 2 more"`` when there are more; a
    hidden name (None) reads as ``"a job of team-b"``. ``""`` when the view names none."""
    items = [w for w in (workload.get("waitingFor") or []) if isinstance(w, dict)]
    if not items:
        return ""
    now = time.time() if now is None else float(now)
    first = items[0]
    ns = first.get("namespace") or "?"
    who = f"{ns}/{first['name']}" if first.get("name") else f"a {'queued' if first.get('kind') == 'pending' else 'running'} job of {ns}"
    bits = [str(first["summary"])] if first.get("summary") else []
    end = first.get("expectedEndAt")
    if isinstance(end, (int, float)):
        verb = "starts and ends" if first.get("kind") == "pending" else "ends"
        bits.append(f"{verb} in ~{_span(float(end) - now)}" if float(end) - now >= 30 else f"{verb} any moment now")
    text = f"after {who}" + (f" ({', '.join(bits)})" if bits else "")
    if len(items) > 1:
        text += f" + {len(items) - 1} more"
    return text


def progress_message(workload: dict, request: dict, now: Optional[float] = None) -> str:
    """The spawn-page line for a lease. Pending: ``"position 1 in team-a's queue · expected in ~4 min
    (2–9 min) · waiting for 1 × A100 after team-b/train-x (2 × nvidia-a100, ends in ~3 min)"`` (position
    counted from 1; the estimate as :func:`estimate_text`, what it waits for as
    :func:`waiting_for_text`), with the queue's reason appended when it is not plain quota (e.g.
    ``"Pending the preemption of 1 workload(s)"``). Admitted: ``"1 × A100 admitted in team-a's
    queue (devices 0)"``. ``now``: epoch seconds (default: the clock)."""
    what = describe_request(request)
    team = workload.get("namespace", "?")
    state = workload.get("state")
    if state == "Pending":
        pos = workload.get("positionInLocalQueue")
        where = f"position {pos + 1} in {team}'s queue" if isinstance(pos, int) else f"queued in {team}'s queue"
        after = waiting_for_text(workload, now)
        line = f"{where} · {estimate_text(workload, now)} · waiting for {what}" + (f" {after}" if after else "")
        msg = workload.get("message") or ""
        if msg.startswith("Pending the preemption"):
            line += f" ({msg})"
        return line
    if state in ("Admitted", "Running"):
        devices = workload.get("visibleDevices") or ""
        return f"{what} admitted in {team}'s queue" + (f" (devices {devices})" if devices else "")
    return f"GPU lease {state}: {workload.get('message') or workload.get('reason') or ''}".rstrip(": ")
