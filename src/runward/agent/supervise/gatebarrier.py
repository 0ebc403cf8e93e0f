"""The GPU gate of a multi-node `restart` (docs/supervision.md, "restart: blocked"): no node
starts its job until every node's GPUs are released, and then all start together. One node's
job started alone would sit in its rendezvous, time out there, and fail the run; the blocked
node would then start later into nothing.

Each node's shim waits here for the whole block. Node 0's shim listens on the run's
coordinator port (nodeproof.listen: the one the job's peers link takes over once the jobs
run); every other node's shim connects to it at once, and both prove they know the run's
secret: nodeproof.py's handshake, as supervise/peers.py speaks it, in realm GATE ({"gate": RANK, ...},
other words in the MAC: a proof here is never one there). Then, as JSON lines:

    member -> node 0   {"free": BOOL}  (its own GPUs, read every OWN_S; said every BEAT_S)
                            {"cancelled": WHY}  (`runward stop` cancelled it)
         node 0 -> member   {"wait": [RANKS]}  (who is not free yet; every BEAT_S)
                            {"ready": TOKEN}  (deciding: answered {"ready": TOKEN, "free": BOOL})
                            {"go": RANK}  or  {"cancel": WHY}

Node 0 says go only when its own GPUs are free at a fresh read and every member proved
itself, said free last, was heard within LOST_S, and answers its "ready" within CONFIRM_S from
a fresh read of its own: a member whose host went silent (no FIN: a power loss, a partition)
stops counting, as does one whose connection closed. A node's GPU
taken again while it waits is seen at its next read (OWN_S) and it is not free again. A stop
of any node cancels every node's attempt: the one stopped says so (a member to node 0, node 0
to every member), since a multi-node attempt starts all together or not at all; a side stopped
while not connected (a member before it joined, node 0 before a member did) goes on telling
for TELL_S at most (a member connects to say so, node 0 keeps listening to answer). Each side
reads the stop's mark (on_poll) at least every POLL_S, and the record says what the node waits
for (note). There is no timeout: a blocked run waits until released or stopped, never
"proceeds anyway"."""

import os
import time

from ..core.nodeproof import (CLOSE, GATE, HELLO_LINE, HELLO_S, LINE, MAX_PENDING, PROVED, answer, handshake, hello,
                              listen, send_line)
from ..core.nodeproof import parse as _parse

POLL_S = 0.5   # the stop's mark read at least this often
OWN_S = 1.0    # this node's GPUs read this often (one nvidia-smi read)
BEAT_S = 1.0   # each side says it is there this often
LOST_S = 4.0   # not heard for this long: that side does not count (a member) or is left (node 0)
CONFIRM_S = 2.0  # at the decision, each member's fresh answer is waited for this long
TELL_S = 5.0     # a stop seen while a node was not connected: it tells the others this long at most


class PeerStopped(Exception):
    """Another node of the run was stopped while every node waited (reason: which)."""

    def __init__(self, reason):
        Exception.__init__(self, reason)
        self.reason = reason


def wait(mn, own, on_poll, note):
    """Return once every node's GPUs are released (node 0 said go). own() reads this node's
    GPUs: (free, why held); on_poll() raises on a stop's mark; note(text) records
    what this node waits for. Raises PeerStopped when another node of the run was stopped;
    whatever ends this node's wait (its own stop: on_poll's exception) is said to the others."""
    side = _Coordinator(mn, own, on_poll, note) if int(mn["rank"]) == 0 else _Member(mn, own, on_poll, note)
    try:
        side.run()
    except PeerStopped as c:
        side.cancelled(c.reason)
        raise
    except BaseException:
        side.cancelled(None)
        raise
    finally:
        side.close()


def _node(mn, rank):
    ref = (mn.get("nodes") or [])[rank] if rank < len(mn.get("nodes") or []) else None
    on = ref.get("on") if isinstance(ref, dict) else ref
    return "node %d (%s)" % (rank, on) if on else "node %d" % rank


def _waiting_for(mn, ranks):
    return "GPUs released here; waiting for %s" % ", ".join(_node(mn, r) for r in ranks)


def _stopped(mn, rank):
    return "%s was stopped while every node waited for the GPUs" % _node(mn, rank)


class _Side:
    def __init__(self, mn, own, on_poll, note):
        self.mn, self.own, self.on_poll, self._note = mn, own, on_poll, note
        self.rank, self.nnodes = int(mn["rank"]), int(mn["nnodes"])
        self.free, self.held, self.next_own, self.waiting = False, None, 0.0, None

    def read_own(self, now):
        if now >= self.next_own:
            self.free, self.held = self.own()
            self.next_own = time.monotonic() + OWN_S
        return self.free

    def note(self):
        """What this node waits for, as status says it: its own GPUs first."""
        self._note(self.waiting if self.free else self.held)


class _Coordinator(_Side):
    def __init__(self, *a):
        _Side.__init__(self, *a)
        self.srv, self.sel = None, None
        self.pending = {}   # socket -> handshake state
        self.members = {}   # rank -> {"sock", "free", "heard", "buf"}
        self.next_beat, self.token = 0.0, None

    def run(self):
        import selectors
        self.sel = selectors.DefaultSelector()
        while True:
            self.on_poll()
            now = time.monotonic()
            self._bind()
            self.read_own(now)
            self._dispatch(POLL_S)
            now = time.monotonic()
            self._forget(now)
            missing = [r for r in range(1, self.nnodes) if not (self.members.get(r) or {}).get("free")]
            self._beat(now, missing)
            if self.srv is not None:
                self.waiting = _waiting_for(self.mn, missing) if missing else \
                    "GPUs released here and on every node: starting together"
            self.note()
            if self.srv is None or missing or not self.free:
                continue
            self.free, self.held = self.own()  # a fresh read at the decision, and every member's
            if self.free and self._confirmed():
                for r, m in self.members.items():
                    send_line(m["sock"], {"go": r})
                return

    def _dispatch(self, timeout):
        for key, _ in self.sel.select(timeout) if self.sel.get_map() else _idle():
            if key.data == "accept":
                self._accept()
            elif key.fileobj in self.pending:
                self._handshake(key.fileobj)
            else:
                self._heed(key.data, key.fileobj)

    def _confirmed(self):
        """Every member, asked now, answers within CONFIRM_S that its GPUs are free (a fresh
        read there): one whose host went silent a moment ago cannot, so nothing starts."""
        self.token = os.urandom(8).hex()
        for m in self.members.values():
            m["ready"] = False
            send_line(m["sock"], {"ready": self.token})
        deadline = time.monotonic() + CONFIRM_S
        while time.monotonic() < deadline:
            self.on_poll()
            if len(self.members) < self.nnodes - 1:
                return False
            # .get: a member that connected again meanwhile was not asked; it has no answer
            if all(m.get("ready") for m in self.members.values()):
                return True
            self._dispatch(min(POLL_S, max(0.0, deadline - time.monotonic())))
        return False

    def _bind(self):
        import selectors
        if self.srv is not None:
            return
        try:
            self.srv = listen(self.mn)
        except OSError as e:
            self.waiting = "GPUs released here; waiting to start every node together: %s (another process " \
                "holds that port)" % e
            return
        self.sel.register(self.srv, selectors.EVENT_READ, "accept")

    def _accept(self):
        import selectors
        try:
            c, _ = self.srv.accept()
        except OSError:
            return
        c.setblocking(False)
        if len(self.pending) >= MAX_PENDING:  # a flood of silent connections: the oldest makes room
            self._close(next(iter(self.pending)))
        self.pending[c] = {"buf": b"", "until": time.monotonic() + HELLO_S}
        self.sel.register(c, selectors.EVENT_READ, None)

    def _handshake(self, c):
        """A hello (answered with our proof), then the member's proof; anything else closes it."""
        st = self.pending[c]
        said = handshake(GATE, self.mn, st, _recv(c), lambda msg: send_line(c, msg))
        if said == CLOSE:
            return self._close(c)
        if said == PROVED:
            del self.pending[c]
            old = self.members.pop(st["rank"], None)  # a member that connected again
            if old is not None:
                self._close(old["sock"])
            m = self.members[st["rank"]] = {"sock": c, "free": False, "heard": time.monotonic(), "buf": st["buf"]}
            self.sel.modify(c, self.sel.get_key(c).events, st["rank"])
            return self._lines(st["rank"], m)  # what came with its proof

    def _heed(self, rank, c):
        """A proved member's lines: its GPUs free or not, or its cancel; EOF: it is gone."""
        m = self.members.get(rank)
        if m is None or m["sock"] is not c:
            return self._close(c)
        chunk = _recv(c)
        m["buf"] += chunk
        # whole lines first, even with the EOF: a member stopped before it joined connects,
        # proves itself, says it was cancelled and closes, all in one breath
        self._lines(rank, m)
        if not chunk or len(m["buf"]) > LINE:
            self.members.pop(rank, None)
            self._close(c)

    def _lines(self, rank, m):
        while b"\n" in m["buf"]:
            line, m["buf"] = m["buf"].split(b"\n", 1)
            msg = _parse(line)
            m["heard"] = time.monotonic()
            if "cancelled" in msg:
                raise PeerStopped(_stopped(self.mn, rank))
            if "free" in msg:
                m["free"] = msg["free"] is True
            if msg.get("ready") is not None and msg.get("ready") == self.token:
                m["ready"] = m["free"]

    def _forget(self, now):
        for c, st in list(self.pending.items()):
            if st["until"] < now:
                self._close(c)
        for r, m in list(self.members.items()):
            if now - m["heard"] > LOST_S:  # silent: its host may be gone without a FIN
                del self.members[r]
                self._close(m["sock"])

    def _beat(self, now, missing):
        if now < self.next_beat:
            return
        self.next_beat = now + BEAT_S
        for m in list(self.members.values()):
            send_line(m["sock"], {"wait": missing})

    def cancelled(self, reason):
        """Every member told; one not connected now (before it joined, or between two
        connections) is told when it connects within TELL_S, the port still ours."""
        why = reason or _stopped(self.mn, 0)
        told = set()
        deadline = time.monotonic() + TELL_S
        while True:
            for r, m in list(self.members.items()):
                if r not in told:
                    told.add(r)
                    send_line(m["sock"], {"cancel": why})
            if self.srv is None or len(told) >= self.nnodes - 1 or time.monotonic() > deadline:
                return
            try:
                self._dispatch(min(POLL_S, max(0.0, deadline - time.monotonic())))
            except PeerStopped:  # that member was stopped too: it is told all the same
                pass

    def _close(self, c):
        self.pending.pop(c, None)
        try:
            self.sel.unregister(c)
        except (KeyError, ValueError):
            pass
        c.close()

    def close(self):
        for c in list(self.pending) + [m["sock"] for m in self.members.values()]:
            self._close(c)
        self.members.clear()
        if self.srv is not None:
            self._close(self.srv)
        if self.sel is not None:
            self.sel.close()


def _idle():
    time.sleep(POLL_S)  # nothing to watch yet (the port not ours yet): the next look
    return ()


def _recv(c):
    try:
        return c.recv(65536)
    except OSError:
        return b""


class _Member(_Side):
    def __init__(self, *a):
        _Side.__init__(self, *a)
        self.sock, self.buf, self.said, self.next_beat, self.heard = None, b"", None, 0.0, 0.0
        self.addr = (self.mn.get("master_addr"), int(self.mn["coord_port"]))

    def run(self):
        while True:
            self.on_poll()
            now = time.monotonic()
            self.read_own(now)
            self.note()
            if self.sock is None and not self._join():
                time.sleep(POLL_S)
                continue
            if (self.said != self.free or now >= self.next_beat) and not self._say():
                self._drop()
                continue
            if self._listen():
                return
            if time.monotonic() - self.heard > LOST_S:  # node 0 silent: connect again
                self._drop()

    def _join(self, on_poll=None, until=None):
        """A connection to node 0 that proved it knows the secret (and we sent our proof)."""
        import socket
        try:
            sock = socket.create_connection(self.addr, timeout=POLL_S * 4)
        except OSError as e:
            self.waiting = "GPUs released here; waiting for node 0's coordinator at %s:%s: %s" % (self.addr + (e,))
            return False
        said, nm = hello(GATE, self.mn, self.rank)
        hello_until = time.monotonic() + HELLO_S if until is None else min(until, time.monotonic() + HELLO_S)
        buf = _line(sock, b"", hello_until, on_poll or self.on_poll) if send_line(sock, said) else None
        proof = answer(GATE, self.mn, self.rank, nm, _parse(buf.split(b"\n", 1)[0])) if buf is not None else None
        if proof is None or not send_line(sock, proof):
            sock.close()
            self.waiting = ("GPUs released here; waiting for node 0's coordinator at %s:%s: the listener there did "
                            "not prove it knows the run's secret" % self.addr)
            return False
        self.sock, self.buf, self.said, self.heard = sock, buf.split(b"\n", 1)[1], None, time.monotonic()
        return True

    def _say(self):
        self.said, self.next_beat = self.free, time.monotonic() + BEAT_S
        return send_line(self.sock, {"free": self.free})

    def _listen(self):
        """True on node 0's go; its wait list noted; its cancel raised; EOF: connect again."""
        import socket
        if b"\n" not in self.buf:
            try:
                self.sock.settimeout(POLL_S)
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except OSError:
                chunk = b""
            if not chunk or len(self.buf) > LINE:
                self._drop()
                return False
            self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            msg = _parse(line)
            self.heard = time.monotonic()
            if msg.get("go") == self.rank:
                return True
            if isinstance(msg.get("ready"), str):  # node 0 decides: our GPUs, read now
                self.free, self.held = self.own()
                self.next_own = time.monotonic() + OWN_S
                if not send_line(self.sock, {"ready": msg["ready"], "free": self.free}):
                    self._drop()
                    return False
            if "cancel" in msg:
                raise PeerStopped(str(msg["cancel"]))
            if isinstance(msg.get("wait"), list):
                self.waiting = _waiting_for(self.mn, [r for r in msg["wait"] if type(r) is int and r != self.rank] or [0])
        return False

    def _drop(self):
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buf = None, b""

    def cancelled(self, reason):
        """Our own stop (REASON None): node 0 is told, and tells the others. Not connected now
        (stopped before we joined, or between two connections): we connect to say so, for
        TELL_S at most (node 0's host may be down), our stop's mark no longer read."""
        if reason is not None:
            return
        deadline = time.monotonic() + TELL_S
        while self.sock is None and time.monotonic() < deadline:
            if not self._join(lambda: None, deadline):
                time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        if self.sock is not None:
            send_line(self.sock, {"cancelled": self.rank})

    def close(self):
        self._drop()


def _line(sock, buf, until, on_poll):
    """BUF with at least one whole line (read in POLL_S waits, the stop's mark read between
    them), or None when the link drops, the line runs long, or UNTIL passes."""
    import socket
    while b"\n" not in buf:
        on_poll()
        if (until is not None and time.monotonic() > until) or len(buf) > HELLO_LINE:
            return None
        try:
            sock.settimeout(POLL_S)
            chunk = sock.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return buf
