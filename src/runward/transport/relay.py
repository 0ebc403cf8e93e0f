"""The relay: an ssh host's resident agent kept one round trip away.

A read-only call through the control master's forward (transport/residentroute.py) pays two round
trips: the master opens a channel to the resident's socket, then the request goes and its
reply comes. The relay is a small local process, one per forward, that keeps the
connections of earlier calls open (the head's "keep": the resident serves the next request
on the same connection, each in a child forked for it), so a call through it pays the
second round trip only. Nothing is opened ahead of a call: the relay starts with the
connection the call that started it has just used, and opens another only when a call finds
every kept one busy.

It listens on <control dir>/p-<name> beside the forward r-<name> (a 0700 directory of our
own; a connection from another uid is refused, SO_PEERCRED), passes each request through
unchanged, and hands back what comes until the reply line. What comes is the resident's
answer of now: the relay keeps connections, never answers. It exits after `idle` seconds
without a call, once its forward connects no more (the control master is gone), or once its
socket is removed or replaced. A call that gets no reply from it goes the way it would
without it.

Run as `python3 -I -S transport/relay.py LISTEN FORWARD IDLE [FD]` (FD: a kept connection handed
over); stdlib only, and it imports nothing of runward's: it outlives the CLI that started it.
"""

import fcntl
import json
import os
import select
import socket
import struct
import sys
import threading
import time

KEPT_MAX = 4  # idle connections kept; each holds a forked child on the far side
ACK_S = 10.0  # a kept connection's child says it took the request within this, else another is asked


class Relay:
    def __init__(self, forward):
        self.forward = forward
        self.kept = []  # connections to the forward, idle, each after a complete reply
        self.lock = threading.Lock()
        self.last = time.monotonic()
        self.gone = False  # the forward connects no more: the control master has exited
        self.active = 0  # calls being served

    def take(self):
        """A kept connection, or a new one to the forward; None where there is none."""
        with self.lock:
            if self.kept:
                return self.kept.pop(), True
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.forward)
        except OSError:
            s.close()
            self.gone = True
            return None, False
        return s, False

    def give_back(self, s):
        with self.lock:
            if len(self.kept) < KEPT_MAX and not self.gone:
                self.kept.append(s)
                return
        s.close()

    def serve(self, client):
        """One call: its request read whole, sent on a kept connection (on a new one where a
        kept one turns out closed before any byte of its reply), and what comes handed back
        until the reply line."""
        with self.lock:
            self.active += 1
        try:
            if _peer_uid(client) != os.getuid():
                return
            client.settimeout(30.0)
            rf = client.makefile("rb")
            head = rf.readline()
            parts = head.split()
            if len(parts) != 2 or not parts[0].isdigit():
                return
            body = rf.read(int(parts[0])) if int(parts[0]) else b""
            line = rf.readline()
            if len(body) != int(parts[0]) or not line.endswith(b"\n"):
                return
            request = b"%s %s keep\n" % (parts[0], parts[1]) + body + line
            client.settimeout(None)
            for _ in range(KEPT_MAX + 1):  # each kept one may turn out let go
                up, was_kept = self.take()
                if up is None:
                    return
                state = _pass(up, request, client, ACK_S if was_kept else None)
                if state == "done":
                    self.give_back(up)
                    return
                up.close()
                if state not in ("closed", "silent") or not was_kept:
                    return  # mid-reply, or the caller left: the caller sees the end
        except OSError:
            pass
        finally:
            client.close()
            with self.lock:
                self.last = time.monotonic()
                self.active -= 1


def _pass(up, request, client, ack_s=None):
    """Send request on up; hand what comes back to client until the reply line. "done",
    "closed" (up ended before any byte: a kept connection the far side let go), "silent"
    (no byte within ack_s: a kept connection whose far child is stopped or stuck; the far
    side's first byte, an empty line, comes as soon as its child has read the request),
    "broken" (ended mid-reply), or "left" (the caller closed)."""
    try:
        up.sendall(request)
    except OSError:
        return "closed"
    buf, sent, pending, first = b"", False, 0, True
    while True:
        ready = select.select([up, client], [], [], ack_s if first else None)[0]
        if not ready:
            return "silent"
        if client in ready:
            return "left"  # closed (or sending past its one request: a caller not to serve)
        try:
            chunk = up.recv(1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            return "broken" if sent or buf else "closed"
        if first:
            first = False
            if chunk.startswith(b"\n"):  # the far side took it (a keep head's request)
                chunk = chunk[1:]
                if not chunk:
                    continue
        buf += chunk
        out = b""
        while buf:
            if pending:  # raw bytes after a {"data": N} event
                n = min(pending, len(buf))
                out, buf, pending = out + buf[:n], buf[n:], pending - n
                continue
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl + 1], buf[nl + 1:]
            out += line
            kind, n = _kind(line)
            if kind == "reply":
                client.sendall(out)
                return "done" if not buf else "broken"  # nothing may follow the reply
            pending = n
        if out:
            client.sendall(out)
            sent = True


def _kind(line):
    """("reply", 0) for the reply line, ("event", N) for an event (N raw bytes follow a
    {"data": N} event), ("other", 0) for what is neither."""
    if line.startswith(b'{"event": ') and len(line) > 200:
        return "event", 0  # ({"data": N} is short: a long event is never one)
    try:
        msg = json.loads(line)
    except ValueError:
        return "other", 0
    if not isinstance(msg, dict):
        return "other", 0
    if "event" in msg:
        ev = msg["event"]
        if isinstance(ev, dict) and len(ev) == 1 and isinstance(ev.get("data"), int) and ev["data"] > 0:
            return "event", ev["data"]
        return "event", 0
    return ("reply", 0) if "ok" in msg else ("other", 0)


def _peer_uid(conn):
    try:
        return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
    except (OSError, struct.error):
        return None


def _listen(path):
    """Bound under a temporary name and renamed, so a connect never finds it bound but not
    yet listening. (socket, inode). The same as agent/core/resident.py's: this file imports
    nothing of runward's, and the agent travels as its own blob."""
    os.umask(0o077)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = "%s.%d" % (path, os.getpid())
    try:
        os.unlink(tmp)
    except OSError:
        pass
    srv.bind(tmp)
    srv.listen(64)
    os.rename(tmp, path)
    return srv, os.stat(path).st_ino


def _detach(keep):
    """Close every descriptor but 0-2 and keep, and leave the caller's directory. The relay
    outlives the CLI that starts it by its idle time: what that CLI inherited without
    close-on-exec (a cron job's `exec 9>lock; flock -n 9`, a pipe whose reader waits for its
    EOF) must not stay held by it, nor the directory it ran in (a mount kept busy)."""
    os.chdir("/")
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        fds = range(3, min(os.sysconf("SC_OPEN_MAX"), 1 << 16))
    for fd in fds:
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass


def main(argv):
    listen, forward, idle = os.path.abspath(argv[1]), os.path.abspath(argv[2]), float(argv[3])
    idle = min(idle, 86400.0) if idle >= 1 else 600.0  # (nan too)
    _detach(int(argv[4]) if len(argv) > 4 else None)
    handed = socket.socket(fileno=int(argv[4])) if len(argv) > 4 else None
    lock = os.open(listen + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another relay serves this forward
    relay = Relay(forward)
    if handed is not None:
        relay.give_back(handed)
    try:
        srv, ino = _listen(listen)
    except OSError:
        return 1
    try:
        while not relay.gone:
            left = relay.last + idle - time.monotonic()
            if left <= 0 and not relay.active:
                return 0
            if not select.select([srv], [], [], min(max(left, 0.5), 5.0))[0]:
                try:
                    if os.stat(listen).st_ino != ino or not os.path.exists(forward):
                        return 0  # replaced or removed; the forward's socket file is gone
                except OSError:
                    return 0
                continue
            try:
                client, _ = srv.accept()
            except OSError:
                continue
            relay.last = time.monotonic()
            threading.Thread(target=relay.serve, args=(client,), daemon=True).start()
        return 0
    finally:
        try:
            if os.stat(listen).st_ino == ino:
                os.unlink(listen)  # no new call comes; those under way end first (60 s at most)
        except OSError:
            pass
        end = time.monotonic() + 60
        while relay.active and time.monotonic() < end:
            time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
