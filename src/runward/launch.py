"""What `runward` runs first (the console script, and `python -m runward`), and the local
cache's file helpers; both need nothing but os.

A warm read-only call to an ssh host is one channel opening and one exchange with the host's
resident agent (docs/protocol.md), and the CLI's own start-up (argparse, json, its modules,
parsing: about 10 ms) used to come before the opening began. entry() first opens the
connections the same command line made last time (cache/hot: argv, working directory and
RUNWARD_* settings -> the forward sockets its calls got replies through), so the channel
opening overlaps the start-up. It is a guess, and only that: transport takes a connection
opened here for the very socket it chose itself, never another; one left unused is closed
unread (the host's resident then forks a child that sees end of file). Then cli.main runs,
and the process leaves without the interpreter's teardown.
"""

from __future__ import annotations

import os
import sys

PRECONNECTED: dict = {}  # forward socket path -> socket entry() connected to it
USED: list = []          # the forwards this process's calls got their replies through
_HOT_KEEP = 64           # command lines remembered in cache/hot
_HOT_ENV = ("RUNWARD_HOME", "RUNWARD_CONFIG", "RUNWARD_SSH_CONFIG", "RUNWARD_RESIDENT")


def entry() -> None:
    """main(), then out without the interpreter's teardown, which frees every module's
    objects one by one (6-7 ms, a fifth of a warm status). Output is flushed first, and
    every thread and child the CLI starts is done with by the time main() returns. An
    exception or a SystemExit (argparse's errors, --help) leaves the ordinary way."""
    argv = sys.argv[1:]
    key = _hot_key(argv)
    hot = _hot_lines()
    _preconnect(key, hot)
    from .cli import main
    code = main(argv)
    _remember(key, hot)
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: started with that descriptor closed
                stream.flush()
    except OSError:  # a closed pipe: let the interpreter report it as it always does
        sys.exit(code)
    os._exit(code)


def _hot_key(argv: list[str]) -> str:
    """One line (repr escapes tabs and newlines) naming a command line where it runs."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    return repr((argv, cwd, [os.environ.get(k, "") for k in _HOT_ENV]))


def _hot_lines() -> list[str]:
    return (read_cache(cache_path("hot")) or b"").decode("utf-8", "replace").splitlines()


def _preconnect(key: str, hot: list[str]) -> None:
    prefix = key + "\t"
    line = next((x for x in hot if x.startswith(prefix)), None)
    if line is None:
        return
    import _socket
    for path in line[len(prefix):].split("\t"):
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            s.connect(path)
        except OSError:
            s.close()
            continue
        PRECONNECTED[path] = s


def _remember(key: str, hot: list[str]) -> None:
    """Record what this command line used, where that changed: nothing is written for a
    command that used no resident (start, stop, exec: their command lines may carry
    secrets) unless a stale guess must go."""
    prefix = key + "\t"
    old = next((x for x in hot if x.startswith(prefix)), None)
    new = prefix + "\t".join(sorted(set(USED))) if USED else None
    if new == old:
        return
    keep = [x for x in hot if not x.startswith(prefix)][-(_HOT_KEEP - 1):]
    if new:
        keep.append(new)
    write_cache(cache_path("hot"), "".join(x + "\n" for x in keep).encode())


# The local cache ($RUNWARD_HOME/cache): what makes a call cheap, all safe to delete.

def local_home() -> str:
    return os.path.abspath(os.path.expanduser(os.environ.get("RUNWARD_HOME") or "~/.runward"))


def cache_path(name: str) -> str:
    return os.path.join(local_home(), "cache", name)


def read_cache(path: str) -> bytes | None:
    """A cache file's bytes, or None when it is missing or not safely ours: owned by
    another user or writable by others, its contents could steer what we send or skip."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
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
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
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
