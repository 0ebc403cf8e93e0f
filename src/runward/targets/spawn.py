"""A hop chain's command run here: a child started by posix_spawn, stdin and stdout on pipes,
stderr in an unlinked file, in a session of its own. Below transport/ (which runs the agent
through it) and the ssh hop's own questions to ssh (sshresolve.py's `ssh -G`), as sshconf.py's
child environment is."""

from __future__ import annotations

import os

from .sshconf import child_environ

TAG_LINE = b"runward-hop "  # targets/ssh.py's TAG


def tag_of(line: bytes) -> tuple[int, int] | None:
    """(pid, start time) from a tag line, or None."""
    words = line.split()
    if len(words) == 3 and words[0] == TAG_LINE.strip() and words[1].isdigit() and words[2].isdigit():
        return int(words[1]), int(words[2])
    return None


class Spawned:
    """One call's far end: a child with stdin and stdout on pipes and stderr in an unlinked
    file. It replaces subprocess.Popen, whose imports (selectors, threading, locale,
    contextlib) cost every call about 5 ms before it starts; os.posix_spawn does what a call
    needs. stderr goes to a file, not a pipe: an ssh ControlPersist master forked by the call
    keeps a pipe open for minutes (we would wait for its EOF), and an agent writing more than
    a pipe's 64 KiB there before its reply would stall on a pipe read only at the end.

    Like Popen(close_fds=True), the child inherits no descriptor but 0, 1 and 2, and SIGPIPE
    and SIGXFSZ are back to their defaults there (Python ignores SIGPIPE in itself).

    The child leads a session, and so a process group, of its own (setsid), so that kill()
    -- a call's timeout, a failed handler, Ctrl-C of a call that does not outlive its caller --
    ends it with everything it started that is still in that group (a local agent's
    nvidia-smi or shell; the ssh, podman or pct client with its ProxyCommand): killing the pid
    alone left those running as orphans. What is detached on purpose has left the group by
    setsid (a start's shim and job, the resident, an ssh ControlPersist master) and is not
    touched. A terminal's Ctrl-C reaches only the CLI's group now: the CLI ends the child
    itself, or leaves one that outlives it (a stop) to run on. A session rather than a bare
    group: with no controlling terminal nothing below can be stopped by SIGTTIN or SIGTTOU,
    as a background group that touched the terminal would be."""

    def __init__(self, argv: list[str]):
        from _signal import SIGPIPE, SIGXFSZ
        from _thread import allocate_lock
        self._lock = allocate_lock()
        self.returncode: int | None = None
        self.spoke = False  # a line came from the far side: every hop on the way answered
        self.killed = False  # kill() signalled it: the call was given up here
        fds: list[int] = []
        try:
            for make in (_unlinked_file, os.pipe, os.pipe):
                got = make()
                for fd in (got if isinstance(got, tuple) else (got,)):
                    fds.append(fd)
                    fds[-1] = _high_fd(fd)
            err, in_r, in_w, out_r, out_w = fds
            actions = [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                       (os.POSIX_SPAWN_DUP2, err, 2)]
            actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds()]
            argv = _from_root(argv)
            self.pid = os.posix_spawnp(argv[0], argv, child_environ(), file_actions=actions,
                                       setsigdef=(SIGPIPE, SIGXFSZ), setsid=True)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        os.close(in_r)
        os.close(out_w)
        self._err = err
        self.stdin = os.fdopen(in_w, "wb")
        self.stdout = os.fdopen(out_r, "rb")

    def kill(self) -> None:
        """SIGKILL to the child's whole process group (its pid is the group's id). Under the
        lock, and only before wait() has reaped the child: while its leader is unreaped the
        group id cannot have been given to another process."""
        with self._lock:
            if self.returncode is None:
                self.killed = True
                try:
                    os.killpg(self.pid, 9)
                except ProcessLookupError:
                    pass

    def await_death(self, bound: float = 1.0) -> bool:
        """After kill(): True once no process of the child's group runs (each a zombie, reaped,
        or gone), within BOUND seconds. SIGKILL is delivered when a process next runs, which on
        a loaded host is after killpg() has returned: a CLI that exits at once would leave them
        alive a moment -- the child, and what it started in its group (a hop's own child: the
        attach of lxc-attach under `pct exec`, a shell's background job)."""
        import time
        deadline = time.monotonic() + bound
        while self._group_runs():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def _group_runs(self) -> bool:
        """Whether a process of the child's group (its pid is the group's id) is alive and
        not a zombie. The id cannot be given to another group while one of its members lives."""
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # a member that became another user's (a setuid program): read /proc as below
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    fields = f.read().rsplit(b") ", 1)[1].split(b" ", 3)
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and fields[2] == str(self.pid).encode() and fields[0] not in (b"Z", b"X"):
                return True
        return False

    def hop_tag(self) -> tuple[int, int] | None:
        """(pid, start time) that a tagged ssh hop's remote shell wrote first on stderr
        (targets/ssh.py's TAG), read from the stderr file as it is now; None without one."""
        if self._err < 0:
            return None
        try:
            head = os.pread(self._err, 200, 0)
        except OSError:
            return None
        return tag_of(head.split(b"\n", 1)[0]) if head.startswith(TAG_LINE) and b"\n" in head else None

    def leave(self) -> None:
        """Let the child run on without us: our ends of its pipes closed, never waited for
        (it is reaped by whoever adopts it once this CLI has exited)."""
        for f in (self.stdin, self.stdout):
            try:
                f.close()
            except OSError:
                pass
        if self._err >= 0:
            os.close(self._err)
            self._err = -1

    def wait(self) -> int:
        if self.returncode is None:
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
            with self._lock:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            self.stdout.close()
            try:
                self.stdin.close()
            except OSError:
                pass  # the far side went away with our input unread
        return self.returncode

    def stderr_bytes(self) -> bytes:
        """Everything the child wrote to stderr (call after wait())."""
        if self._err < 0:
            return b""
        os.lseek(self._err, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(self._err, 1 << 16):
            chunks.append(chunk)
        os.close(self._err)
        self._err = -1
        return b"".join(chunks)


# ssh's ControlPersist master is the call's own ssh, forked into the background by daemon(3)
# with nochdir: it would keep the caller's directory busy for as long as it lives (`umount`:
# "target is busy"). posix_spawn cannot change directory, so ssh is started from / by a
# shell that execs it (the same pid); its argv names no relative path (targets/sshconf.ssh_base).
_FROM_ROOT = 'cd / && exec "$0" "$@"'


def _from_root(argv: list[str]) -> list[str]:
    """argv run from / where it is ssh and we are elsewhere; unchanged where ssh is not on
    PATH (the spawn's FileNotFoundError then says so)."""
    if argv[0] != "ssh":
        return argv
    try:
        if os.getcwd() == "/":
            return argv
    except OSError:
        pass  # our directory was removed: still not one to hand on
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        exe = os.path.join(d or ".", "ssh")
        if os.path.isabs(exe) and os.access(exe, os.X_OK) and not os.path.isdir(exe):
            return ["/bin/sh", "-c", _FROM_ROOT, exe, *argv[1:]]
    return argv


def _unlinked_file() -> int:
    d = os.environ.get("TMPDIR") or "/tmp"
    try:
        return os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
    except (AttributeError, OSError):  # not Linux, or a filesystem without O_TMPFILE
        import tempfile
        with tempfile.TemporaryFile() as f:
            return os.dup(f.fileno())


def _high_fd(fd: int) -> int:
    """fd moved to 3 or above: where the CLI runs with 0, 1 or 2 closed, a pipe can take
    one of them, and a spawn's dup2 onto the same number would leave it close-on-exec."""
    if fd > 2:
        return fd
    import fcntl
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return new


def _inheritable_fds() -> list[int]:
    """Descriptors above 2 that would survive exec: inherited from whoever started the CLI
    (Python opens its own close-on-exec)."""
    for d in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(d)
            break
        except OSError:
            continue
    else:
        return []
    fds = []
    for n in names:
        fd = int(n)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    fds.append(fd)
            except OSError:
                pass  # the listing's own descriptor, closed by now
    return fds
