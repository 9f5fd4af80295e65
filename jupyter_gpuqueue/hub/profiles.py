"""From a spawner's profile to a lease request, and from a lease to the spawn page's words.

Pure functions of plain data (profile dicts, Workload views as docs/rest-api.md shapes them).
"""

from __future__ import annotations

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


def profiles_form(profiles: list) -> str:
    """An ``options_form`` (HTML) choosing one of ``profiles`` (``slug``, ``display_name``,
    ``description``, ``default``) as ``user_options["profile"]``, for spawners without
    KubeSpawner's own profile form."""
    from html import escape

    rows = []
    chosen = selected_profile(list(profiles), {}) if profiles else None
    for p in profiles:
        slug = escape(str(p["slug"]), quote=True)
        checked = " checked" if p is chosen else ""
        desc = f"<div class='text-muted'>{escape(str(p['description']))}</div>" if p.get("description") else ""
        rows.append(
            f"<div class='radio'><label><input type='radio' name='profile' value='{slug}'{checked}> "
            f"<strong>{escape(str(p.get('display_name') or p['slug']))}</strong>{desc}</label></div>"
        )
    return "<p>Servers with a GPU wait their turn in your team's GPU queue.</p>" + "".join(rows)


def lease_request_for(spawner: Any) -> Optional[dict]:
    """The lease request for a spawner's next server, or None when it needs no GPU.

    Profiles come from ``spawner.profile_list`` (KubeSpawner; callables are not evaluated here:
    give such profiles a static ``gpuqueue_profiles`` instead) or ``spawner.gpuqueue_profiles``;
    with neither, ``spawner.gpuqueue_request`` (empty: no GPU)."""
    profiles = setting(spawner, "gpuqueue_profiles") or getattr(spawner, "profile_list", None) or []
    if isinstance(profiles, dict):  # KubeSpawner 7.1 accepts a dict keyed by slug
        profiles = [dict(v, slug=v.get("slug", k)) for k, v in profiles.items()]
    if callable(profiles):
        profiles = []
    profile = selected_profile(list(profiles), getattr(spawner, "user_options", None) or {})
    if profile is not None:
        return request_from_profile(profile)
    req = dict(setting(spawner, "gpuqueue_request") or {})
    return req or None


def progress_message(workload: dict, request: dict) -> str:
    """The spawn-page line for a lease: ``"position 3 in team-a's queue, waiting for 1 × A100"``
    while pending (position counted from 1), with the queue's reason appended when it is not
    plain quota (e.g. ``"Pending the preemption of 1 workload(s)"``)."""
    what = describe_request(request)
    team = workload.get("namespace", "?")
    state = workload.get("state")
    if state == "Pending":
        pos = workload.get("positionInLocalQueue")
        where = f"position {pos + 1} in {team}'s queue" if isinstance(pos, int) else f"queued in {team}'s queue"
        line = f"{where}, waiting for {what}"
        msg = workload.get("message") or ""
        if msg.startswith("Pending the preemption"):
            line += f" ({msg})"
        return line
    if state in ("Admitted", "Running"):
        devices = workload.get("visibleDevices") or ""
        return f"{what} admitted in {team}'s queue" + (f" (devices {devices})" if devices else "")
    return f"GPU lease {state}: {workload.get('message') or workload.get('reason') or ''}".rstrip(": ")
