"""Jobs as their owner: which OS account a hub user's jobs run as, and what that account gets.

Used by the local backend on the hub-managed service (``c.GpuQueueApp.run_jobs_as_owner``,
docs/security.md). A hub user's name maps to an OS account name by ``os_account_template``
(``"{username}"``, or a preset: ``"tljh"`` for The Littlest JupyterHub's ``jupyter-<user>``
accounts, ``"systemd"`` for SystemdSpawner's default ``username_template``), unless
``os_account_map`` names the account for that user. The account must exist (``pwd``) and must not
be root; an account below ``UID_MIN`` (a system account) is used only when ``os_account_map`` names
it explicitly. :meth:`Accounts.lookup` raises Forbidden naming the hub user and the account looked
for otherwise, and the submission is refused.

What a job gets from its :class:`Account`: the uid, primary gid and supplementary groups
(``os.getgrouplist``), the umask a login would give it (pam_umask's rules: ``umask=`` in the GECOS
field, else ``UMASK`` of /etc/login.defs, with the group bits copied from the owner's under
``USERGROUPS_ENAB`` for a user-private group), and a fresh environment: ``HOME``, ``USER``,
``LOGNAME``, ``SHELL`` of the account and a standard ``PATH`` (nothing of the service's own
environment: no hub API token, no database URL).
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import stat
from dataclasses import dataclass, field
from typing import Mapping, Optional

from ..errors import Forbidden, ValidationError

PRESETS = {
    # The Littlest JupyterHub: tljh/user_creating_spawner.py names the account
    # generate_system_username("jupyter-" + hub user name) (tljh/normalize.py): the name itself
    # below 26 characters, else its first 26 characters, "-" and 5 hex digits of its SHA-256.
    "tljh": "jupyter-{username}",
    # SystemdSpawner: username_template, default "{USERNAME}" (the hub user name).
    "systemd": "{USERNAME}",
}

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
LOGIN_DEFS = "/etc/login.defs"
_FIELD_RE = re.compile(r"\{([^{}]*)\}")


def tljh_system_username(name: str) -> str:
    """TLJH's ``generate_system_username``: ``name`` if shorter than 26 characters, else its first
    26 characters, ``-`` and the first 5 hex digits of its SHA-256 (at most 32 characters)."""
    if len(name) < 26:
        return name
    return f"{name[:26]}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:5]}"


def _login_defs(path: str = LOGIN_DEFS) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and not parts[0].startswith("#"):
                    out[parts[0]] = parts[1]
    except OSError:
        pass
    return out


def login_umask(pw: pwd.struct_passwd, defs: Optional[Mapping[str, str]] = None) -> int:
    """The umask pam_umask gives ``pw`` at login: ``umask=NNN`` in its GECOS field (comma-separated
    entries), else ``UMASK`` of /etc/login.defs (022 if unset); then, with ``USERGROUPS_ENAB yes``,
    a non-root account whose primary group has its own name and id (a user-private group) gets the
    group bits equal to the owner bits (022 → 002), as pam_umask's ``usergroups`` does."""
    defs = _login_defs() if defs is None else defs
    for entry in (pw.pw_gecos or "").split(","):
        entry = entry.strip()
        if entry.startswith("umask="):
            try:
                return int(entry[len("umask="):], 8) & 0o777
            except ValueError:
                break
    try:
        umask = int(defs.get("UMASK", "022"), 8) & 0o777
    except ValueError:
        umask = 0o022
    if defs.get("USERGROUPS_ENAB", "yes").lower() == "yes" and pw.pw_uid != 0 and pw.pw_uid == pw.pw_gid:
        try:
            same_name = grp.getgrgid(pw.pw_gid).gr_name == pw.pw_name
        except KeyError:
            same_name = False
        if same_name:
            umask = (umask & ~0o070) | ((umask & 0o700) >> 3)
    return umask


@dataclass(frozen=True)
class Account:
    """The OS account a job runs as (see the module docstring)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str
    umask: int
    path: str = DEFAULT_PATH
    hub_user: str = field(default="", compare=False)

    def environ(self) -> dict[str, str]:
        """The job's base environment: HOME, USER, LOGNAME, SHELL and PATH, nothing else."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name,
                "SHELL": self.shell or "/bin/sh", "PATH": self.path}


class Accounts:
    """Maps hub users to OS accounts.

    ``template``: ``"{username}"`` (or ``{USERNAME}``), any text around it (``"lab-{username}"``),
    or a preset name (``"tljh"``, ``"systemd"``); ``overrides``: hub user → account name, which
    wins over the template (and may name a system account); ``path``: the jobs' ``PATH``.
    Raises ValidationError naming ``os_account_template`` / ``os_account_map`` for a bad setting."""

    def __init__(self, template: str = "{username}", overrides: Optional[Mapping[str, str]] = None,
                 path: str = DEFAULT_PATH):
        if not isinstance(template, str) or not template.strip():
            raise ValidationError("must be a template such as '{username}', or 'tljh' / 'systemd'",
                                  "os_account_template")
        self.preset = template if template in PRESETS else None
        self.template = PRESETS.get(template, template)
        fields = _FIELD_RE.findall(self.template)
        if not fields or any(f not in ("username", "USERNAME") for f in fields):
            bad = [f for f in fields if f not in ("username", "USERNAME")]
            raise ValidationError(
                f"{template!r} must contain {{username}} (or {{USERNAME}}) and no other field"
                + (f"; {{{bad[0]}}} is not known here (the hub's user id is not)" if bad else "")
                + f"; presets: {', '.join(sorted(PRESETS))}", "os_account_template")
        self.overrides: dict[str, str] = {}
        for user, name in (overrides or {}).items():
            if not isinstance(user, str) or not user or not isinstance(name, str) or not name.strip():
                raise ValidationError(f"entry {user!r}: {name!r} must map a hub user name to an OS account name",
                                      "os_account_map")
            self.overrides[user] = name.strip()
        self.path = path
        try:
            self.uid_min = int(_login_defs().get("UID_MIN", "1000"))
        except ValueError:
            self.uid_min = 1000

    def account_name(self, user: str) -> str:
        """The OS account name for hub user ``user`` (not looked up)."""
        if user in self.overrides:
            return self.overrides[user]
        name = self.template.replace("{username}", user).replace("{USERNAME}", user)
        return tljh_system_username(name) if self.preset == "tljh" else name

    def lookup(self, user: str) -> Account:
        """The Account of hub user ``user``. Raises Forbidden (field ``user``) naming the user and
        the account looked for when it does not exist, is root, or is a system account (uid below
        UID_MIN) that ``os_account_map`` does not name."""
        if not isinstance(user, str) or not user:
            raise Forbidden("a job needs an owner to run as", "user")
        name = self.account_name(user)
        how = "c.GpuQueueApp.os_account_map" if user in self.overrides else \
            f"c.GpuQueueApp.os_account_template {self.preset or self.template!r}"
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise Forbidden(
                f"hub user {user!r} has no OS account {name!r} on this machine (looked up by {how}); jobs run "
                f"as their owner's account: ask an admin to create it or map the user in "
                f"c.GpuQueueApp.os_account_map", "user") from None
        if pw.pw_uid == 0:
            raise Forbidden(f"hub user {user!r} maps to OS account {name!r}, which is root: jobs never run as root",
                            "user")
        if pw.pw_uid < self.uid_min and user not in self.overrides:
            raise Forbidden(
                f"hub user {user!r} maps to OS account {name!r} (uid {pw.pw_uid}), a system account (below "
                f"UID_MIN {self.uid_min}); name it in c.GpuQueueApp.os_account_map to allow it", "user")
        try:
            groups = tuple(sorted(set(os.getgrouplist(pw.pw_name, pw.pw_gid))))
        except OSError:
            groups = (pw.pw_gid,)
        return Account(name=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid, groups=groups, home=pw.pw_dir,
                       shell=pw.pw_shell, umask=login_umask(pw), path=self.path, hub_user=user)


def run_as_owner_policy(setting: Optional[bool], mode: str, backend: str, euid: int,
                        account: str = "") -> tuple[bool, list[tuple[str, str]]]:
    """Whether jobs run as their owners' OS accounts, and what the service must say about it at
    start: ``(on, [(level, message), ...])`` with level ``"error"`` or ``"warning"``.

    ``setting``: ``c.GpuQueueApp.run_jobs_as_owner`` (None: not set); ``mode``: "standalone" or
    "hub-service"; ``backend``: "local", "kubernetes", "kueue"; ``euid``: the service's effective
    uid; ``account``: its account name (for the messages).

    The rule (issue 31, docs/security.md): a hub service that runs as root with the local backend
    always runs jobs as their owners — no setting turns that off (False is refused, loudly, and
    jobs still run as their owners), since the jobs would otherwise run as root. A hub service that
    is not root runs every user's job as its own account, and says so. A single-user server run as
    root runs its jobs as root, as its notebooks; it says so. Other backends run jobs in Pods."""
    msgs: list[tuple[str, str]] = []
    if backend != "local":
        return bool(setting), msgs
    if euid == 0 and mode == "hub-service":
        if setting is False:
            msgs.append(("error",
                          "refusing c.GpuQueueApp.run_jobs_as_owner = False: the queue service runs as root, so every "
                          "job would run as root; jobs run as their owners' OS accounts (docs/security.md)"))
        return True, msgs
    if euid == 0 and not setting:
        msgs.append(("warning",
                     "this single-user server runs as root: the jobs it queues run as root too, as its notebooks "
                     "do. Run JupyterLab as your own account; on a machine shared by several people, run the queue "
                     "as the hub service (docs/shared-machine.md)"))
        return False, msgs
    if mode == "hub-service" and not setting:
        who = account or f"uid {euid}"
        msgs.append(("warning",
                     f"the queue service runs as {who}, not root: every user's job runs as {who}, with that account's "
                     "rights on every user's files and on the queue's own state. To run each job as its owner's OS "
                     "account, run the service as root (docs/security.md, docs/shared-machine.md)"))
    return bool(setting), msgs


def require_root(field: str = "run_jobs_as_owner") -> None:
    """Running jobs as their owners switches the job's uid, gid and groups, hands it a log file
    and signals its processes: only root can (a service holding CAP_SETUID through ambient
    capabilities would pass them on to every job). Raises ValidationError naming ``field``."""
    if os.geteuid() != 0:
        raise ValidationError(
            f"running jobs as their owners' OS accounts needs the service to run as root (it runs as uid "
            f"{os.geteuid()}): start the hub service as root, or set c.GpuQueueApp.run_jobs_as_owner = False "
            f"(jobs then run as the service's own account; docs/security.md)", field)


def secure_state_dir(path: str, field: str = "state_dir") -> None:
    """Make the service's state folder (ledger, logs, exit records) its own: created 0700 if
    missing, set to 0700, owned by the service's uid, and neither it nor any folder above it
    writable by others (unless sticky, as /tmp) so that no job can replace it. Raises
    ValidationError naming ``field`` otherwise."""
    path = os.path.abspath(path)
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ValidationError(f"{path} must be a folder, not a link", field)
    if st.st_uid != os.geteuid():
        raise ValidationError(f"{path} belongs to uid {st.st_uid}, not to the service (uid {os.geteuid()})", field)
    os.chmod(path, 0o700)
    parent = os.path.dirname(path)
    while True:
        pst = os.stat(parent)
        if pst.st_uid not in (0, os.geteuid()) or (pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX):
            raise ValidationError(
                f"{parent} (above {path}) can be changed by other accounts (owner uid {pst.st_uid}, mode "
                f"{stat.S_IMODE(pst.st_mode):o}): a job could replace the service's state; put it elsewhere", field)
        if parent == os.path.dirname(parent):
            break
        parent = os.path.dirname(parent)
