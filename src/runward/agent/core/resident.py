"""The resident: this agent kept running on an ssh target, for the read-only verbs.

Over ssh, a command that reads its stdin gets its first byte one round trip after it
starts (sshd opens the session's window only once the exec request is done), and each call
pays a shell's and a Python's start-up there. The resident removes all three from the
verbs that only read: it listens on a unix socket in the home's 0700 cache directory, and
the CLI reaches it through its ssh control master (a streamlocal forward), so a status is
one channel opening plus one exchange. It is started by an ordinary call that asks for it
("resident" in the request), serves each connection in a forked child exactly as an
agent started over ssh would (same request and reply bytes), and exits after `idle`
seconds without a connection, or once its socket is removed or replaced. Its command line
is the bootstrap and RESIDENT_ARG, like the shim's: no request data. Every operation that
changes something (start, stop, kill, exec, push) still runs in a fresh agent: the resident
refuses it, and refuses a connection from any uid but its own (SO_PEERCRED).
"""

import fcntl
import os
import sys
import time

try:
    import _signal as signal  # signal.py's enums cost ~9 ms at import (proc/terminate.py)
except ImportError:
    import signal

from . import boot
from .wire import AgentFailure, json_dumps, reply

OPS = frozenset(("status", "gpus", "ps", "spec", "health", "hash", "ping", "logs", "nspid", "free_ports",
                 "manifest"))
PATH_MAX = 100  # sun_path holds 108 bytes; the resident binds "<path>.<pid>" first


def path(home):
    return os.path.join(home.path, "cache", "resident-%s.sock" % boot.own_sha()[:16])


def wanted(req):
    want = req.get("resident")
    return (isinstance(want, dict) and req.get("op") in OPS and not req.get("follow")
            and boot.SHIPPED.get("cached") == 1)


def _lock_fd(sock):
    """The lock file's fd, opened in the home's cache directory, or None where that is not
    ours alone (nothing world-writable is trusted)."""
    try:
        os.makedirs(os.path.dirname(sock), 0o700, exist_ok=True)
        st = os.lstat(os.path.dirname(sock))
        if st.st_uid != os.getuid() or st.st_mode & 0o077 or (st.st_mode & 0o170000) != 0o040000:
            return None
        return os.open(sock + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None


def ensure(req, home):
    """{"path", "alive"} for the caller's reply: the resident serving this home, started
    now unless one holds its lock ("ended_idle": the last one ended on its idle time, not
    killed). None where there can be none: an agent the bootstrap could not cache (the
    resident starts from that cache), a path too long for a socket, or a cache directory
    that is not ours alone."""
    sock = path(home)
    if len(sock) + 8 > PATH_MAX:
        return None
    try:
        home.ensure()  # 0700, ours (its parents' modes are not ours to set)
    except (OSError, AgentFailure):
        return None
    fd = _lock_fd(sock)
    if fd is None:
        return None
    if lock_held(fd):
        return {"path": sock, "alive": True}
    try:
        idle = min(max(float(req["resident"].get("idle", 600)), 1.0), 86400.0)
    except (TypeError, ValueError):
        idle = 600.0
    # the last resident ended on its idle time (its mark, below): the caller's forward that
    # found it gone is no failed try. One killed left no mark: that one counts.
    ended_idle = _take_idle_mark(sock)
    if not _start(sock, idle):
        return None
    return {"path": sock, "alive": False, "ended_idle": ended_idle}


def _idle_mark(sock):
    return sock[:-len(".sock")] + ".idle"


def _take_idle_mark(sock):
    try:
        os.unlink(_idle_mark(sock))
        return True
    except OSError:
        return False


def _start(sock, idle):
    """Start the resident, detached; False if it could not be (the call is unaffected)."""
    import subprocess
    log = None
    try:
        log = os.open(sock[:-len(".sock")] + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        p = subprocess.Popen([sys.executable, "-S", "-c", boot.BOOTSTRAP, boot.RESIDENT_ARG],
                             stdin=subprocess.PIPE, stdout=log, stderr=log, close_fds=True,
                             start_new_session=True, cwd="/")  # it outlives us: holds no directory
        p.returncode = 0  # never waited for: it outlives us
        # from the code cache (SHIPPED["cached"]): the header carries the hash alone
        p.stdin.write(b"0 %s\n" % boot.own_sha().encode() + json_dumps({"path": sock, "idle": idle}).encode() + b"\n")
        p.stdin.close()
        return True
    except OSError:
        return False
    finally:
        if log is not None:
            os.close(log)


def lock_held(fd):
    """Whether a resident holds the lock open on fd (it does for as long as it lives).
    Closes fd, releasing our own try: the resident takes the lock itself."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def state(home):
    """For doctor: the resident of this agent version and home, looked at, not started."""
    sock = path(home)
    try:
        fd = os.open(sock + ".lock", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return {"path": sock, "alive": False}
    return {"path": sock, "alive": lock_held(fd)}


def _listen(sock):
    """A listening unix socket at sock, bound under a temporary name and renamed, so a
    connect never finds the path bound but not yet listening. Returns (socket, inode)."""
    import socket
    os.umask(0o077)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = "%s.%d" % (sock, os.getpid())
    try:
        os.unlink(tmp)
    except OSError:
        pass
    srv.bind(tmp)
    srv.listen(64)
    os.rename(tmp, sock)
    return srv, os.stat(sock).st_ino


def main(params, serve, preload):
    """Serve connections, each in a forked child running serve(stdin, stdout), until idle
    for params["idle"] seconds or the socket is removed or replaced. preload(OPS) imports,
    once, what those verbs use, so that each connection's forked child starts with it."""
    sock, idle = params["path"], float(params["idle"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    lock = os.open(sock + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another one serves this home
    srv, ino = _listen(sock)
    preload(OPS)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
    try:
        if _accept_loop(srv, sock, ino, idle, lambda conn: _child(conn, srv, lock, serve, idle, sock)) == "idle":
            try:
                os.close(os.open(_idle_mark(sock), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
            except OSError:
                pass
        return 0
    finally:
        try:
            if os.stat(sock).st_ino == ino:
                os.unlink(sock)
        except OSError:
            pass


def _accept_loop(srv, sock, ino, idle, handle):
    import select
    last = time.monotonic()
    while True:
        left = last + idle - time.monotonic()
        if left <= 0:
            try:  # a kept connection's request marks the lock file (_child's `still`)
                left = os.stat(sock + ".lock").st_mtime + idle - time.time()
            except OSError:
                pass
            if left <= 0:
                return "idle"  # (main's mark for the next caller)
            last = time.monotonic() + left - idle
        if not select.select([srv], [], [], min(left, 5.0))[0]:
            try:
                if os.stat(sock).st_ino != ino:
                    return  # replaced
            except OSError:
                return  # removed
            continue
        try:
            conn, _ = srv.accept()
        except OSError:
            continue
        last = time.monotonic()
        if os.fork() == 0:
            handle(conn)
        conn.close()


def _child(conn, srv, lock, serve, idle, sock):
    """The forked child of one connection: serves it and exits."""
    rc = 1
    resident = os.getppid()

    def still():
        """Whether a kept connection may serve its next request: only while the resident
        that accepted it lives (a killed or replaced resident takes its connections along),
        which counts the request as activity against its idle time."""
        if os.getppid() != resident:
            return False
        try:
            os.utime(sock + ".lock")
        except OSError:
            pass
        return True
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the ops wait for their own children
        srv.close()
        os.close(lock)
        rc = serve_connection(conn, serve, idle, still)
    finally:
        os._exit(rc)


def peer_uid(conn):
    """The uid of the process at the other end of a unix socket (SO_PEERCRED: the kernel's
    word, fixed at connect), or None where it cannot be read."""
    import socket
    import struct
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[1]
    except (OSError, AttributeError, struct.error):
        return None


def _refuse(conn, wf, message):
    """Reply with an error before reading the request, then let the peer finish: a unix
    socket closed with unread bytes resets the peer, whose read then fails before it gets
    the reply. Whatever it sends is read (5 s, 1 MiB at most) and dropped, never run."""
    import socket
    try:
        reply(wf, {"v": boot.PROTOCOL, "ok": False, "error": {"type": "AgentError", "message": message}})
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(5.0)
        left = 1 << 20
        while left > 0:
            chunk = conn.recv(65536)
            if not chunk:
                break
            left -= len(chunk)
    except OSError:
        pass


def serve_connection(conn, serve, idle=600.0, still=lambda: True):
    """One connection, as the agent serves its stdin and stdout: "<length> <sha256>", the
    source if any (we run it already), the request line; events and one reply back. Only
    our own uid is served (the 0700 directories already keep others out, but not root, and
    a request run here runs as us), and only the read-only verbs (OPS).

    A head of "<length> <sha256> keep" (the CLI's relay, transport/relay.py) asks for the connection
    to be kept: after the reply, the next request is read from it, for up to `idle` seconds;
    each such request is answered with an empty line first, as soon as it is read.
    Each request of a kept connection runs in a child forked for it, so one leaves nothing
    to the next; a request that ends without its reply (a bad head, a refused op, a crash)
    ends the connection, and the relay asks no more on it; so does still() saying no."""
    rf, wf = conn.makefile("rb"), conn.makefile("wb")
    uid = peer_uid(conn)
    if uid != os.getuid():
        _refuse(conn, wf, "the resident agent serves uid %d only; a connection from uid %s is refused"
                % (os.getuid(), "unknown" if uid is None else uid))
        return 4
    try:
        while True:
            head = rf.readline().split()
            if not head:
                return 0  # the relay closed a kept connection
            if len(head) not in (2, 3) or not head[0].isdigit() or head[2:] not in ([], [b"keep"]):
                return 2
            if int(head[0]) and len(rf.read(int(head[0]))) != int(head[0]):
                return 2
            if head[1].decode("ascii", "replace") != boot.own_sha():
                reply(wf, {"v": boot.PROTOCOL, "ok": False, "error": {
                    "type": "AgentMissing", "message": "the resident runs agent %s" % boot.own_sha()[:12]}})
                return 3
            if len(head) == 2:
                return serve(rf, wf, OPS)
            if not still():
                return 0  # closed unanswered: the relay asks again on a new connection
            # an empty line first: this kept connection's child is here and took the request
            # (a child stopped or stuck sends nothing, and the relay asks on another)
            wf.write(b"\n")
            wf.flush()
            if _serve_kept(rf.readline(), wf, serve) or not _next_request(conn, idle):
                return 0
    finally:
        try:
            wf.close()
            conn.close()
        except OSError:
            pass


def _serve_kept(line, wf, serve):
    """One request of a kept connection, in a child of its own; True where the connection
    ends with it (the child did not end with a reply: exit 0, or 1 for an error reply)."""
    import io
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            rc = serve(io.BytesIO(line), wf, OPS)
        finally:
            os._exit(rc)
    status = os.waitpid(pid, 0)[1]  # (EINTR is retried by Python itself, PEP 475)
    return not (os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 1))


def _next_request(conn, idle):
    """Whether a kept connection became readable within idle seconds: a next request, or its
    end (serve_connection's loop reads that as an empty head)."""
    import select
    return bool(select.select([conn], [], [], idle)[0])
