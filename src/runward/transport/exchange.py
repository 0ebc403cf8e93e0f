"""One exchange with a spawned agent process (transport/agentcall.py's split, by concern): the child
started by posix_spawn with its stdout an unlinked file and no stray descriptor, its stdin fed
(the blob, the request, a payload) from a thread, its event lines and one reply read back
(and a binary op's data frames handed on); what the far side printed that is not JSON kept
for transport/diagnosis.py."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable

from ..errors import HopFailed
from ..targets.sshconf import child_environ


DECIDE_S = 10.0  # how long an interrupted start waits for the far side's decision


def run_call(argv, head, payload, on_event, timeout, on_data=None, held=False, late_body=None, outlive=False,
              decide=None, watch=None):
    """decide (a start's): a predicate of events; on Ctrl-C the call waits, DECIDE_S at most,
    for an event it holds (the launch), the reply or the far side's end, and the
    KeyboardInterrupt carries what came (`decision`: _await_decision). watch: a HopWatch
    (transport/diagnosis.py) that ends the call once its hop is found wedged."""
    seen: list[dict] = []
    if decide is not None:
        inner = on_event

        def on_event(ev):  # noqa: F811  (the caller's, and what decides)
            if decide(ev):
                seen.append(ev)
            if inner is not None:
                inner(ev)
    try:
        proc = Spawned(argv)
    except FileNotFoundError as e:
        raise HopFailed(f"cannot run {argv[0]!r} on this machine: {e.strerror}",
                        f"install {argv[0]} or put it on PATH", hop="local")
    writer = timer = None
    got = Replies(on_event, on_data)
    left = False
    try:  # until the reading below: a Ctrl-C or an error here ends the child too
        if watch is not None:
            watch.start(proc)
        if late_body is not None:  # the agent starts on what it has; the request follows (call's late)
            try:
                proc.stdin.write(head)
                proc.stdin.flush()
            except OSError:
                pass  # the far side went away (or refused the hash alone): its reply says which
            head = late_body()  # raising: ended below, before any request (the far side runs nothing)
        if payload is None:
            # The agent reads its whole input before it writes a byte, so a plain write cannot
            # deadlock here; a thread is only needed to stream a payload while we read. A hop
            # that never starts the agent never reads it either: the write blocks once the
            # pipe is full (a wedged `pct exec`), and a Ctrl-C there ends the child.
            _feed(proc.stdin, head, None, held)
            if held:
                _heartbeat(proc)
        else:
            import threading
            writer = threading.Thread(target=_feed, args=(proc.stdin, head, payload), daemon=True)
            writer.start()
        if timeout:
            import threading
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
    except BaseException:
        if timer is not None:
            timer.cancel()
        _give_up(proc, watch)
        raise
    try:
        for line in proc.stdout:
            proc.spoke = True
            got.take(line)
            if got.pending:
                got.pass_bytes(proc.stdout)
    except KeyboardInterrupt as ki:
        if decide is not None:
            ki.decision = _await_decision(proc, got, seen)
        if not outlive:
            try:
                if watch is not None:
                    watch.await_tag(proc)  # the hop's tag, in flight at a Ctrl-C soon after the start
            finally:
                proc.kill()
            raise
        left = True  # the far side goes on (a stop's KILL after the grace): left to it
        proc.leave()
        raise
    except BaseException:  # a caller's handler failing (its reader gone: `logs -f | head`)
        proc.kill()
        raise
    finally:
        if watch is not None:
            watch.cancel()
        rc = None if left else proc.wait()
        if timer:
            timer.cancel()
        if watch is not None and proc.killed and not left:
            watch.end_far(proc.hop_tag())  # given up here: its hop's command on the host too
        stderr = b"" if left else proc.stderr_bytes()
    if writer is not None:
        writer.join(timeout=5)
    return rc, got.garbage, got.reply, _untagged(stderr.decode("utf-8", "replace"))


def _give_up(proc: "Spawned", watch) -> None:
    """End the child (its group) before the call's reading began, with its hop command on
    the ssh host (the watch's end_far), and reap it."""
    try:
        if watch is not None:
            watch.cancel()
            watch.await_tag(proc)
    finally:
        proc.kill()
    proc.wait()
    if watch is not None:
        watch.end_far(proc.hop_tag())
    proc.stderr_bytes()


_TAG_LINE = b"runward-hop "  # targets/ssh.py's TAG


def _untagged(text: str) -> str:
    """stderr without the tag line a tagged ssh hop's shell writes first (targets/ssh.py)."""
    if not text.startswith("runward-hop "):
        return text
    first, _, rest = text.partition("\n")
    return rest if _tag_of(first.encode()) is not None else text


def _tag_of(line: bytes) -> tuple[int, int] | None:
    """(pid, start time) from a tag line, or None."""
    words = line.split()
    if len(words) == 3 and words[0] == _TAG_LINE.strip() and words[1].isdigit() and words[2].isdigit():
        return int(words[1]), int(words[2])
    return None


def _await_decision(proc: "Spawned", got: "Replies", seen: list[dict]) -> dict:
    """Ctrl-C came while a start's far side had not said whether it launched the job: the far
    agent goes on without us (its own session; an ssh session's command gets no hangup), so
    what the target does is read, not guessed. Lines are read on for DECIDE_S at most, until
    the launch event ({"event": ev}), the reply ({"reply": ...}) or the far side's end
    ({"ended": True}); {"waited": DECIDE_S} when none came in time, {"gave_up": True} on a
    second Ctrl-C, {"lost": exit status} when the link ended, not the agent: all unknown."""
    if seen or got.reply is not None:
        return {"event": seen[0]} if seen else {"reply": got.reply}
    fired: list[bool] = []
    timer = None
    try:  # from its first line: a second Ctrl-C at any moment of the wait is "gave up", never lost
        import threading
        timer = threading.Timer(DECIDE_S, lambda: (fired.append(True), proc.kill()))
        try:
            sys.stderr.write(f"runward: Ctrl-C: waiting up to {DECIDE_S:g}s for the target to say whether it "
                             "launched the job (Ctrl-C again to stop waiting)\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # the terminal is gone (SIGHUP): the wait goes on without its word
        timer.start()
        for line in proc.stdout:
            got.take(line)
            if got.pending:
                got.pass_bytes(proc.stdout)
            if seen or got.reply is not None:
                break
    except KeyboardInterrupt:
        return {"gave_up": True}
    except (OSError, ValueError):
        pass  # the pipe went with the far side: its end, below
    finally:
        if timer is not None:
            timer.cancel()
    if seen or got.reply is not None:
        return {"event": seen[0]} if seen else {"reply": got.reply}
    if fired:
        return {"waited": DECIDE_S}
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        return {"gave_up": True}
    # EOF is our child's end, not always the far agent's: ssh's own failure (255) or a client
    # killed by a signal (a link that dropped, a killed ssh or podman client) leaves the far
    # agent going on without us; only an exit status the agent gave says it ended
    return {"lost": rc} if rc == 255 or rc < 0 else {"ended": True}


class Replies:
    """What an agent writes, line by line: its events handed on as they come, its one reply
    kept, and the first lines that are not its JSON (the diagnosis shows them)."""

    def __init__(self, on_event: Callable[[dict], None] | None, on_data: Callable[[bytes], None] | None = None):
        self.on_event, self.on_data = on_event, on_data
        self.reply: dict | None = None
        self.garbage: list[bytes] = []
        self.events = False
        self.pending = 0  # raw bytes that follow the last line (its event was {"data": N})

    def pass_bytes(self, stream) -> None:
        """The pending raw bytes from stream to on_data, 1 MiB at most at a time."""
        left, self.pending = self.pending, 0
        while left:
            chunk = stream.read(min(left, 1 << 20))
            if not chunk:
                return  # the far side ended mid-frame: its missing reply is diagnosed
            left -= len(chunk)
            self.on_data(chunk)

    def take(self, line: bytes) -> None:
        msg = _parse_line(line)
        if msg is None:
            if len(self.garbage) < 20:
                self.garbage.append(line)
        elif "event" in msg:
            ev = msg["event"]
            if isinstance(ev, dict) and "notice" in ev:
                # what the far side says while the call waits (a run lock held by another
                # verb): for the person, on stderr, whatever the call's own events are
                sys.stderr.write(f"runward: {ev['notice']}\n")
                sys.stderr.flush()
                return
            self.events = True
            if self.on_data is not None and isinstance(ev, dict) and isinstance(ev.get("data"), int) and len(ev) == 1:
                self.pending = ev["data"]
                return
            if self.on_event is not None:
                self.on_event(ev)
        else:
            self.reply = msg


def agent_missing(reply: dict | None) -> bool:
    """The far side does not have this agent version (it ran nothing)."""
    return (reply is not None and not reply.get("ok")
            and (reply.get("error") or {}).get("type") == "AgentMissing")


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

    def hop_tag(self) -> tuple[int, int] | None:
        """(pid, start time) that a tagged ssh hop's remote shell wrote first on stderr
        (targets/ssh.py's TAG), read from the stderr file as it is now; None without one."""
        if self._err < 0:
            return None
        try:
            head = os.pread(self._err, 200, 0)
        except OSError:
            return None
        return _tag_of(head.split(b"\n", 1)[0]) if head.startswith(_TAG_LINE) and b"\n" in head else None

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


def _feed(stdin, head: bytes, payload: Iterable[bytes] | None, held: bool = False) -> None:
    """Write the call's input; close it unless held (a follower's: closed by wait(), or by
    the kernel when this process dies, which is the far side's sign that nobody follows)."""
    try:
        stdin.write(head)
        if payload is not None:
            for chunk in payload:
                stdin.write(chunk)
        if held:
            stdin.flush()
        else:
            stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the far side went away; the reader side diagnoses why


HEARTBEAT_S = 1.0  # a held call's heartbeat on the agent's stdin: a byte this often


def _heartbeat(proc: "Spawned", every: float = HEARTBEAT_S) -> None:
    """A byte on a held call's stdin every EVERY seconds until the call ends: the far side
    reads them as the caller being there, and ends its follower once they stop (a link that
    dropped without closing anything; wire.caller_gone)."""
    import threading

    def beat() -> None:
        while proc.returncode is None:
            time.sleep(every)
            try:
                proc.stdin.write(b"\n")
                proc.stdin.flush()
            except (OSError, ValueError):  # the far side went away, or wait() closed it
                return
    threading.Thread(target=beat, daemon=True).start()


def _parse_line(line: bytes) -> dict | None:
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) and ("event" in msg or ("ok" in msg and "v" in msg)) else None
