"""The demo hub's spawner: every demo user's notebook server runs as one unprivileged OS account.

The demo (``jupyterhub_config/local/``) logs in made-up users (DummyAuthenticator) who have no OS
accounts, so their servers cannot run as themselves. JupyterHub's SimpleLocalProcessSpawner would
run them as the hub's own account, which is root when an admin starts the hub as root: every
user's notebook code would run as root. :class:`DemoAccountSpawner` runs them as ``demo_account``
instead (``gpuqueue-demo`` unless set; ``jupyterhub_config/local/run.sh`` creates it), in homes
``home_dir_template`` owned by that account, mode 0700. It refuses to start a server as root, or
when the account is missing (the spawn fails with the reason).

It is a demo: the demo users share that one account, so they can read each other's files. A machine
shared by real people runs each server as its user's own account (``jupyterhub_config/shared/``,
docs/shared-machine.md).

Without root the hub cannot switch accounts: servers then run as the hub's own account, as
SimpleLocalProcessSpawner does.
"""

from __future__ import annotations

import os
import pwd

from jupyterhub.spawner import SimpleLocalProcessSpawner, set_user_setuid
from traitlets import Unicode

DEFAULT_DEMO_ACCOUNT = "gpuqueue-demo"


class DemoAccountSpawner(SimpleLocalProcessSpawner):
    """SimpleLocalProcessSpawner that, when the hub runs as root, runs every server as
    ``demo_account`` (never root). Raises RuntimeError from ``start`` naming the account and the fix
    when it does not exist or is root."""

    demo_account = Unicode(
        DEFAULT_DEMO_ACCOUNT,
        help="""The OS account every demo user's server runs as when the hub runs as root (never root;
        created by jupyterhub_config/local/run.sh).""",
    ).tag(config=True)

    def _account(self) -> pwd.struct_passwd | None:
        """The demo account's passwd entry when the hub runs as root; None otherwise."""
        if os.geteuid() != 0:
            return None
        try:
            pw = pwd.getpwnam(self.demo_account)
        except KeyError:
            raise RuntimeError(
                f"the demo runs users' servers as the OS account {self.demo_account!r}, which does not exist: "
                f"create it (useradd --system --user-group --create-home --home-dir /var/lib/{self.demo_account} "
                f"--shell /usr/sbin/nologin {self.demo_account}; jupyterhub_config/local/run.sh does) — the demo "
                "never runs users' servers as root") from None
        if pw.pw_uid == 0:
            raise RuntimeError(f"the demo account {self.demo_account!r} is root: the demo never runs users' servers "
                               "as root")
        return pw

    def make_preexec_fn(self, name):
        pw = self._account()
        if pw is None:
            return super().make_preexec_fn(name)
        setuid = set_user_setuid(pw.pw_name, chdir=False)
        home = self.home_dir

        def preexec():
            setuid()
            os.chdir(home)

        return preexec

    def user_env(self, env):
        env = super().user_env(env)
        pw = self._account()
        if pw is not None:
            env["USER"] = env["LOGNAME"] = pw.pw_name
            env["SHELL"] = "/bin/sh"
        return env

    async def start(self):
        pw = self._account()
        if pw is not None:
            # The home is made here, as root, and handed to the account (0700): the server's
            # preexec runs after the switch and could not create it under a root-owned folder.
            os.makedirs(os.path.dirname(self.home_dir), mode=0o755, exist_ok=True)
            os.makedirs(self.home_dir, mode=0o700, exist_ok=True)
            os.chown(self.home_dir, pw.pw_uid, pw.pw_gid)
            os.chmod(self.home_dir, 0o700)
        return await super().start()
