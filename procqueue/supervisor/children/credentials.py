"""The user children run as (``--job-user``), resolved once by the supervisor.

A child starts as the supervisor's user, imports the app, and switches to
the job user before it says Hello, so no job code ever runs with the
supervisor's rights: a job can't signal its supervisor, other children of
another user, or read what only the supervisor's user may read. The ids
travel in the environment of the children (and of the fork server's
template, whose forks inherit it): `protocol.CHILD_IDS_ENV`.
"""

from __future__ import annotations

import grp
import os
import pwd

from procqueue import errors, protocol


def child_env(job_user: str | None) -> dict[str, str] | None:
    """The environment for the children of a supervisor run with `job_user`
    (None: the supervisor's own, unchanged).

    Raises ConfigError when the user or group doesn't exist, or when this
    process can't change users (it isn't root).
    """
    if job_user is None:
        return None
    user, _, group = job_user.partition(":")
    entry = _user(user.strip())
    gid = entry.pw_gid if not group.strip() else _group(group.strip())
    if os.geteuid() != 0 and (entry.pw_uid, gid) != (os.geteuid(), os.getegid()):
        raise errors.ConfigError(
            f"--job-user {job_user}: the supervisor must run as root to start "
            f"children as another user (it runs as uid {os.geteuid()})"
        )
    env = dict(os.environ)
    env[protocol.CHILD_IDS_ENV] = f"{entry.pw_uid}:{gid}"
    env.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)
    return env


def _user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, OverflowError):
        raise errors.ConfigError(f"--job-user: no user {name!r} on this host") from None


def _group(name: str) -> int:
    try:
        return grp.getgrgid(int(name)).gr_gid if name.isdigit() else grp.getgrnam(name).gr_gid
    except (KeyError, OverflowError):
        raise errors.ConfigError(f"--job-user: no group {name!r} on this host") from None
