"""Whose the home is, and whether this user can enter it: checked before any op reads or
writes there (store.Home), so a home of another user's is refused with nothing written, and
one this user cannot enter is said as such, never as 'no run named' nor a traceback."""

import os

from .wire import AgentFailure


def not_ours(path):
    """(owner uid, the directory) when writing the home PATH would write into a directory not
    this user's, else None: the home itself owned by another user; or, for root, a home not
    made yet under a directory of another user's. Root with another user's HOME (`sudo -E
    runward ...`) would else leave root-owned files there that the user's own runward cannot
    write. Checked before anything is made (Home.ensure, the bootstrap's code cache)."""
    q = os.path.abspath(path)
    while True:
        try:
            st = os.stat(q)
            break
        except FileNotFoundError:
            if os.path.dirname(q) == q:
                return None
            q = os.path.dirname(q)
        except OSError:
            return None  # what cannot be entered is said by check_readable
    uid = os.getuid()
    if st.st_uid == uid or (q != os.path.abspath(path) and (uid != 0 or st.st_uid == 0)):
        return None
    return st.st_uid, q


def user_of(uid):
    try:
        import pwd
        return "%s's (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except (ImportError, KeyError):
        return "uid %d's" % uid


def unreadable(path, unmade_in=None):
    """The refusal of a home this user cannot enter, or (unmade_in: the directory above it that
    is not writable) cannot make."""
    said = ("cannot be made by this user (uid %d): %s is not writable to it" % (os.getuid(), unmade_in)
            if unmade_in else "is not readable by this user (uid %d)" % os.getuid())
    return AgentFailure("AgentError", "state directory %s %s" % (path, said),
                        "set RUNWARD_HOME to a directory of your own, or run as its owner; nothing was written there")


def check_readable(path):
    """Refuse a home this user cannot enter (HOME=/root kept by `sudo -u USER`, a home made
    0700 by another): a run in it is not known, and a start could not record one."""
    try:
        os.stat(path)
    except PermissionError:  # a directory above it cannot be entered
        raise unreadable(path)
    except OSError:
        return  # missing: made (or refused) where it is written
    if os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK):
        raise unreadable(path)


def nearest_dir(path):
    """The nearest directory above path that exists: where making path was refused."""
    q = os.path.dirname(os.path.abspath(path))
    while q != os.path.dirname(q) and not os.path.isdir(q):
        q = os.path.dirname(q)
    return q
