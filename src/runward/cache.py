"""The local cache ($RUNWARD_HOME/cache): what makes a call cheap, all safe to delete.

Imports nothing of runward's (and nothing but os), so any module may use it without
making an import cycle, and the console script may use it before anything else loads.
"""

from __future__ import annotations

import os


def local_home() -> str:
    return os.path.abspath(os.path.expanduser(os.environ.get("RUNWARD_HOME") or "~/.runward"))


def make_private_dir(path: str) -> None:
    """path and each missing directory above it made 0700 (os.makedirs gives the parents it
    makes 0777 & ~umask: ~/.runward would be 0755), and the home narrowed to 0700 when it is
    ours and only readable by others; one writable by others is refused where it is used.
    Nothing is made in a home that is not this user's (home_not_ours): PermissionError."""
    path = os.path.abspath(path)
    home = local_home()
    if (path + "/").startswith(home + "/") and home_not_ours(home):
        raise PermissionError(13, f"{home} is not this user's (uid {os.getuid()}): nothing is written there")
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
    try:
        st = os.lstat(home)
        if os.path.isdir(home) and not os.path.islink(home) and st.st_uid == os.getuid() \
                and st.st_mode & 0o077 and not st.st_mode & 0o022:
            os.chmod(home, 0o700)
    except OSError:
        pass


def home_not_ours(home: str) -> bool:
    """agent/store.not_ours' rule (this module imports nothing of runward's): the home owned
    by another user, or, for root, a home not made yet under another user's directory: root
    with another user's HOME (sudo -E) would else leave root-owned files the user cannot write."""
    q = home
    while True:
        try:
            st = os.stat(q)
            break
        except FileNotFoundError:
            if os.path.dirname(q) == q:
                return False
            q = os.path.dirname(q)
        except OSError:
            return False
    uid = os.getuid()
    return not (st.st_uid == uid or (q != home and (uid != 0 or st.st_uid == 0)))


def cache_path(name: str) -> str:
    return os.path.join(local_home(), "cache", name)


def read_cache(path: str) -> bytes | None:
    """A cache file's bytes, or None when it is missing or not safely ours: owned by
    another user or writable by others, its contents could steer what we send or skip; not
    a regular file (a FIFO in its place made every call that read it hang: opened without
    blocking, then refused)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_mode & 0o022 or st.st_mode & 0o170000 != 0o100000:  # not S_ISREG (no stat import)
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def write_cache(path: str, data: bytes) -> None:
    """Replace a cache file whole (temporary file, then rename), mode 0600 in a 0700
    directory. A home we cannot write is no error: the cache is then recomputed each time."""
    try:
        make_private_dir(os.path.dirname(path))
        tmp = f"{path}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.rename(tmp, path)
        except OSError:
            os.unlink(tmp)
            raise
    except OSError:
        pass
