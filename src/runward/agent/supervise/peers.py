"""A multi-node run's nodes watching each other, kept by the targets, not the CLI
(docs/multinode.md, "Failure propagation").

Node 0's shim runs a small coordinator: a TCP listener on the coordinator port the CLI chose
on node 0 (ops/nodes.py:free_ports), bound to MASTER_ADDR where that is node 0's own address.
Every other node's shim connects to it (MASTER_ADDR, that port), and each side proves it
knows the run's secret before the other heeds it: nodeproof.py's handshake (realm PEERS:
{"hello": RANK, ...}). Then, as JSON lines:

    member -> coordinator   {"ended": RANK, "failed": BOOL, "exit": {...}}
    coordinator -> member   {"stop": {"rank": R, "why": TEXT}}   {"ended": 0, "failed": false}

A connection that has not proved itself within HELLO_S is closed, as is one whose line
before that runs past HELLO_LINE; at most MAX_PENDING wait at once (the oldest makes room
for a new one), so idle or slow connections cannot exhaust the coordinator (it polls with
selectors, never select() over unbounded descriptors).

A node whose job ends with a failure (a non-zero exit or a signal, not asked for by `stop`),
or whose connection drops before it said it ended, is a failed node; a member that never
reaches a coordinator that proves itself within CONNECT_S is one too. With on_node_failure =
"stop" (the default) the coordinator tells every member, and each shim then stops its own job
with the verified stop (proc/terminate.py: its leader first, the grace, KILL, every member checked
dead); a member that loses the coordinator without its "ended" does the same (a link that
broke, not closed, is first joined again for REJOIN_S: a hiccup of the network stops nothing). A link that
fails (the coordinator cannot listen, its thread dies) is the failure of its node: its record
says `coordinator_lost`, its connections are closed so the others see it, and with "stop"
its job is stopped too. "continue" only records what happened. An end asked for by `stop`
(stop_requested in the record) is never a failure: a user's stop of all nodes does not cascade.
"""

import os
import time

from ..core.nodeproof import (CLOSE, HELLO_LINE, HELLO_S, LINE, MAX_PENDING, PEERS, PROVED, answer, handshake, hello,
                              listen, send_line)
from ..core.nodeproof import parse as _parse
from ..core.runspec import GRACE_S, STOP_SIGNAL
from ..core.procfs import protected, scan
from ..proc.runs import members
from ..proc.terminate import parse_signal, terminate
from ..core.wire import json_dumps

CONNECT_S = 120.0   # how long a member tries to reach the coordinator, and it waits for hellos
RETRY_S = 0.5
TELL_S = 5.0        # how long a member's shim waits, its job ended, for its link to say so
# a member's link to the coordinator is idle while all is well: TCP keepalive probes it, so
# that a node 0 gone silently (its host cut off, its closing words lost in a partition) is
# seen within KEEP_IDLE_S + KEEP_INTVL_S * KEEP_CNT (15-25 s after the cut, by the probes'
# phase), and, once the link is back, at the next probe (node 0's kernel answers a
# connection it has forgotten with a reset)
KEEP_IDLE_S, KEEP_INTVL_S, KEEP_CNT = 10, 5, 3
# a link the keepalive (or a reset) broke is not yet a lost node 0: a hiccup of the network
# breaks it too while node 0's coordinator still runs. The member joins again for up to
# REJOIN_S (a refused connection ends that at once: nothing listens, the coordinator is gone)
REJOIN_S = 30.0
# the partition tests shorten both windows (their waits are these windows), through the
# environment of the agent that starts the shim: RUNWARD_PEERS_KEEPALIVE="IDLE,INTVL,CNT"
# and RUNWARD_PEERS_REJOIN_S; unset in normal use
if os.environ.get("RUNWARD_PEERS_KEEPALIVE"):
    KEEP_IDLE_S, KEEP_INTVL_S, KEEP_CNT = (int(v) for v in os.environ["RUNWARD_PEERS_KEEPALIVE"].split(","))
REJOIN_S = float(os.environ.get("RUNWARD_PEERS_REJOIN_S") or REJOIN_S)


def attach(store, n, att):
    """After the job started: the link of a multi-node run's node (its thread started), else None."""
    mn = att.get("multinode") or {}
    if int(mn.get("nnodes") or 1) < 2 or not mn.get("coord_port"):
        return None
    import threading  # with socket, here: a one-node run's shim (every start) never pays for them
    link = Link(store, n, mn)
    threading.Thread(target=link.run, name="runward-peers", daemon=True).start()
    return link


def ended(link, ex, att):
    """After the shim recorded the job's exit: tell the peers (a failure unless `stop` asked
    for it), and let a stop of our own finish recording before the shim exits."""
    if link is None:
        return
    failed = _failed(ex) and not att.get("stop_requested")
    msg = {"ended": link.rank, "failed": failed, "exit": ex}
    if (att.get("stop_requested") or {}).get("by") == "cli":  # `runward stop` (restart's too) of the run
        msg["stopped_by"] = "`runward stop`"
    link.job_ended(msg)
    link.told.wait(TELL_S)  # a member not connected yet says it once it is (follow)
    link.stop_done.wait(30.0)


def _failed(ex):
    return bool(ex) and (ex.get("signal") is not None or ex.get("code") not in (0, None))


class Link:
    def __init__(self, store, n, mn):
        import threading
        self.store, self.n, self.mn = store, n, mn
        self.rank, self.nnodes = int(mn["rank"]), int(mn["nnodes"])
        self.policy = mn.get("on_node_failure") or "stop"
        self.conns = {}                 # coordinator: rank -> socket
        self.sock = None                # member: its connection, once the coordinator proved itself
        self.rest = b""                 # member: what came after the coordinator's welcome
        self.unproved = None            # member: why the last listener was not heeded
        self.end = None                 # member: its "ended" message, once its job ended
        self.told = threading.Event()   # set once the end was said (or there is no one to say it to)
        self.lock = threading.Lock()    # member: the hello, then the end, once each
        self.job_over = threading.Event()
        self.stop_done = threading.Event()
        self.stop_done.set()            # set while no stop of ours is under way
        self.stops = []                 # coordinator: every stop it told, told again to a member that rejoins
        self.broke = None               # member: why its link broke (an error, not the coordinator's close)
        self.wake_r, self.wake_w = os.pipe()

    # --- both sides

    def run(self):
        """The thread: coordinate (node 0) or follow; an error here is this node's failure,
        said to the others and recorded, never a silent end of the watching."""
        try:
            self.coordinate() if self.rank == 0 else self.follow()
        except Exception as e:
            self.link_failed("watching the peers failed: %s: %s" % (type(e).__name__, e))

    def link_failed(self, why):
        """Our link is gone: the record says so (status: coordinator lost); node 0 tells its
        members first (they heed a proved coordinator); every connection is closed, so the
        others see this node drop; with "stop" our job is stopped as well."""
        self.mark_lost(why)
        if self.rank == 0 and self.policy == "stop" and not self.job_over.is_set():
            self.broadcast({"stop": {"rank": 0, "why": why}})
        for c in list(self.conns.values()) + [self.sock]:
            if c is not None:
                c.close()
        self.conns.clear()
        self.told.set()
        if not self.job_over.is_set():
            self.node_failed(self.rank, why)

    def mark_lost(self, why):
        """The first loss of the link, kept in the record: status shows the run as unwatched."""
        def mark(att):
            if att.get("coordinator_lost"):
                return False
            att["coordinator_lost"] = {"why": why, "at": time.time()}
        self.store.update_attempt(self.n, mark)

    def job_ended(self, msg):
        self.job_over.set()
        if self.rank == 0:
            if msg["failed"]:
                self.node_failed(0, "node 0's job ended: %s" % _describe(msg["exit"]))
            elif msg.get("stopped_by"):  # a user's stop of the run: each node stops, also one it missed
                self.broadcast({"stop": {"rank": 0, "whole": True, "why": "node 0 was stopped by %s: the whole run "
                                                                         "stops" % msg["stopped_by"]}})
                self.broadcast({"ended": 0, "failed": False})
            else:
                self.broadcast({"ended": 0, "failed": False})
            self.told.set()
        else:
            with self.lock:  # not connected yet: follow() says it after its hello
                self.end = msg
                if self.sock is not None:
                    self.send(self.sock, msg)
                    self.told.set()
        os.write(self.wake_w, b"x")

    def send(self, sock, msg):
        return sock is not None and send_line(sock, msg)

    def node_failed(self, rank, why):
        """Node RANK failed: record it; with policy "stop", tell everyone and stop our job."""
        self.note({"rank": rank, "why": why, "at": time.time()})
        if self.policy != "stop":
            return
        if self.rank == 0:
            self.broadcast({"stop": {"rank": rank, "why": why}})
        self.stop_own(rank, why)

    def note(self, event):
        self.store.update_attempt(self.n, lambda att: att.setdefault("peer_events", []).append(event))

    def stop_own(self, rank, why, whole=False):
        """Our job, stopped as `runward stop` would (run lock, stop_requested, the stop
        signal to every process of the job, the grace, KILL), unless it has ended already."""
        if self.job_over.is_set():
            return
        now = self.store.attempt(self.n) or {}
        if now.get("exit") or (now.get("stop_requested") or {}).get("by") == "cli":
            return  # a `runward stop` here is on it already: waiting for its lock would only delay
        self.stop_done.clear()
        try:
            self._stop_locked(rank, why, whole)
        finally:
            self.stop_done.set()

    def _stop_locked(self, rank, why, whole=False):
        store = self.store
        fd = store.lock("stop", 60.0)
        try:
            def mark(att):
                if att.get("exit"):
                    return False
                att["stop_requested"] = {"at": time.time(), "pid": os.getpid(), "by": "peers",
                                         "node": rank, "why": why}
            att = store.update_attempt(self.n, mark)
            if not att or att.get("exit"):
                return
            procs = scan()
            found = members(store.name, att, procs, protected(procs))
            job = att.get("job") or {}

            def find_more():
                ps = scan()
                return members(store.name, att, ps, protected(ps))

            fates = terminate(found, procs, parse_signal(att.get("stop_signal") or STOP_SIGNAL),
                              float(att.get("grace", GRACE_S)), find_more=find_more,
                              group=job.get("pid") if job.get("pid") in found else None)
            left = find_more()
            self.job_over.wait(10.0)  # the shim's main thread records the exit first
            store.update_attempt(self.n, lambda att: att.update(peer_stop={
                "by_node": rank, "whole": whole, "why": why, "at": time.time(), "processes": len(fates),
                "verified_dead": not left}))
        finally:
            store.unlock(fd)

    # --- node 0: the coordinator

    def coordinate(self):
        srv = self._listen()
        try:
            self._serve(srv)
        finally:
            srv.close()

    def _listen(self):
        return listen(self.mn)

    def _serve(self, srv):
        import selectors
        self.sel = sel = selectors.DefaultSelector()  # epoll: any descriptor number, any count
        sel.register(srv, selectors.EVENT_READ, "accept")
        sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.pending, self.bufs, said_end = {}, {}, set()
        deadline = time.monotonic() + CONNECT_S  # None once every member proved itself
        while not self.job_over.is_set():
            deadline = self._check_missing(deadline)
            now = time.monotonic()
            self._expire(now)
            waits = [d - now for d in [deadline] + [p["until"] for p in list(self.pending.values())[:1]]
                     if d is not None]
            for key, _ in sel.select(max(0.0, min(waits)) if waits else None):
                if key.data == "accept":
                    self._accept(srv)
                elif key.data == "pending" and key.fileobj in self.pending:
                    self._read_pending(key.fileobj, said_end)
                elif key.data == "member" and key.fileobj in self.bufs:
                    self._read_member(key.fileobj, said_end)

    def _check_missing(self, deadline):
        if deadline is not None and len(self.conns) >= self.nnodes - 1:
            return None
        if deadline is not None and time.monotonic() >= deadline:
            missing = sorted(set(range(1, self.nnodes)) - set(self.conns))
            self.node_failed(missing[0], "node %d never reached the coordinator" % missing[0])
            return None
        return deadline

    def _accept(self, srv):
        import selectors
        for _ in range(MAX_PENDING):
            try:
                c, _ = srv.accept()
            except BlockingIOError:
                return
            except OSError:  # out of descriptors: the oldest unproved connection makes room
                if not self._drop_oldest():
                    time.sleep(0.1)  # nothing of ours to close: not a busy loop meanwhile
                return
            if len(self.pending) >= MAX_PENDING:
                self._drop_oldest()
            c.setblocking(False)
            self.pending[c] = {"buf": b"", "until": time.monotonic() + HELLO_S}
            self.sel.register(c, selectors.EVENT_READ, "pending")

    def _drop(self, c):
        self.pending.pop(c, None)
        self.bufs.pop(c, None)
        self.sel.unregister(c)
        c.close()

    def _drop_oldest(self):
        for c in self.pending:
            self._drop(c)
            return True
        return False

    def _expire(self, now):
        for c, p in list(self.pending.items()):  # in the order they came: the first to expire first
            if p["until"] > now:
                return
            self._drop(c)

    def _read_pending(self, c, said_end):
        """A connection not proved yet: its hello (answered with our proof), then its proof;
        anything else, or too long a line, closes it unheeded (nodeproof.handshake)."""
        p = self.pending[c]
        try:
            chunk = c.recv(4096)
        except OSError:
            chunk = b""
        said = handshake(PEERS, self.mn, p, chunk, lambda msg: _sent_whole(c, msg))
        if said == CLOSE:
            return self._drop(c)
        if said == PROVED:
            if p["rank"] in self.conns:  # the member rejoins: its old link broke unseen here (no failure)
                self._drop(self.conns.pop(p["rank"]))
            del self.pending[c]
            self.conns[p["rank"]], self.bufs[c] = c, p["buf"]
            c.setblocking(True)
            self.sel.modify(c, self.sel.get_key(c).events, "member")
            for m in self.stops:  # what it may have missed while its link was down
                self.send(c, m)
            return self._member_lines(c, p["rank"], said_end)

    def _read_member(self, s, said_end):
        try:
            chunk = s.recv(65536)
        except OSError:
            chunk = b""
        rank = next((r for r, c in self.conns.items() if c is s), None)
        self.bufs[s] += chunk
        if not chunk or (b"\n" not in self.bufs[s] and len(self.bufs[s]) > LINE):
            self._drop(s)
            self.conns.pop(rank, None)
            if rank is not None and rank not in said_end:
                self.node_failed(rank, "lost the connection to node %d" % rank)
            return
        self._member_lines(s, rank, said_end)

    def _member_lines(self, s, rank, said_end):
        while b"\n" in self.bufs[s]:
            line, self.bufs[s] = self.bufs[s].split(b"\n", 1)
            msg = _parse(line)
            if "ended" in msg and msg["ended"] == rank and rank not in said_end:
                said_end.add(rank)
                if msg.get("failed"):
                    self.node_failed(rank, "node %s's job ended: %s" % (rank, _describe(msg.get("exit"))))

    def broadcast(self, msg):
        if "stop" in msg:
            self.stops.append(msg)
        for c in list(self.conns.values()):
            self.send(c, msg)

    # --- the other nodes: members

    def follow(self):
        sock = self._join()
        if sock is None:
            self.told.set()
            if not self.job_over.is_set():
                why = self.unproved or "could not reach node 0's coordinator at %s:%s" % (
                    self.mn.get("master_addr"), self.mn.get("coord_port"))
                self.mark_lost(why)
                self.node_failed(0, why)
            return
        with self.lock:
            self.sock = sock
            if self.end is not None:  # the job ended before we got here: say so now
                self.send(sock, self.end)
                self.told.set()
        while not self._heed(sock) and not self.job_over.is_set():
            if self.broke is not None and self._rejoin():  # a broken link, not a closed one: node 0 may be there
                sock = self.sock
                continue
            why = "lost the connection to node 0's coordinator"
            if self.broke is not None:
                why += " (%s; no coordinator to rejoin within %gs)" % (self.broke, REJOIN_S)
            self.mark_lost(why)
            self.node_failed(0, why)
            return

    def _rejoin(self):
        """Our link broke (keepalive, reset): join node 0's coordinator again, proved as at the
        start, so that a hiccup of the network stops nothing. True once joined (our end, if it
        came meanwhile, said on the new link)."""
        self.note({"rank": 0, "why": "the link to node 0's coordinator broke (%s): rejoining" % self.broke,
                   "at": time.time()})
        with self.lock:
            old, self.sock = self.sock, None
        old.close()
        sock = self._join(REJOIN_S, refused_ends=True)
        if sock is None:
            return False
        with self.lock:
            self.sock = sock
            if self.end is not None:
                self.send(sock, self.end)
                self.told.set()
        self.note({"rank": 0, "why": "rejoined node 0's coordinator", "at": time.time()})
        return True

    def _heed(self, sock):
        """What the proved coordinator says, until its "ended" (True) or the link drops. A
        stop of the whole run (`runward stop` of node 0) is heeded whatever the policy."""
        keepalive(sock)
        buf, self.broke = self.rest, None
        while True:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = _parse(line)
                if "stop" in msg and isinstance(msg["stop"], dict):
                    self.note(dict(msg["stop"], at=time.time(), told_by=0))
                    if self.policy == "stop" or msg["stop"].get("whole"):
                        self.stop_own(msg["stop"].get("rank"), msg["stop"].get("why"), bool(msg["stop"].get("whole")))
                elif "ended" in msg:
                    return True
            try:
                sock.settimeout(None)
                chunk = sock.recv(65536)
            except OSError as e:  # keepalive's ETIMEDOUT, a reset: the link broke, node 0 may still be there
                self.broke = os.strerror(e.errno) if e.errno else str(e)
                chunk = b""
            if not chunk or len(buf) > LINE:
                return False
            buf += chunk

    def _join(self, within=CONNECT_S, refused_ends=False):
        """A connection to node 0's coordinator that proved it knows the run's secret, tried
        until CONNECT_S, on after our job ended too: its end must still be said (the shim
        waits TELL_S for that, then exits). A listener that does not prove itself is noted
        once and never heeded: we close it and try again."""
        import socket
        addr = (self.mn.get("master_addr"), int(self.mn["coord_port"]))
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                sock = socket.create_connection(addr, timeout=5.0)
            except ConnectionRefusedError:
                if refused_ends:
                    return None  # node 0 answers and nothing listens: its coordinator is gone
                time.sleep(RETRY_S)
                continue
            except OSError:
                time.sleep(RETRY_S)
                continue
            why = self._handshake(sock)
            if why is None:
                return sock
            sock.close()
            if why != self.unproved:
                self.unproved = why
                self.note({"rank": 0, "why": why, "at": time.time()})
            time.sleep(RETRY_S)
        return None

    def _handshake(self, sock):
        """None once the listener proved it knows the secret (and we sent our proof), else why not."""
        said, nm = hello(PEERS, self.mn, self.rank)
        where = "%s:%s" % sock.getpeername()[:2]
        if not self.send(sock, said):
            return "node 0's coordinator at %s closed the connection at our hello" % where
        buf, until = b"", time.monotonic() + HELLO_S
        while b"\n" not in buf:
            left = until - time.monotonic()
            if left <= 0 or len(buf) > HELLO_LINE:
                return "the listener at %s did not answer our hello in %gs" % (where, HELLO_S)
            try:
                sock.settimeout(left)
                chunk = sock.recv(4096)
            except OSError:
                chunk = b""
            if not chunk:
                return "node 0's coordinator at %s closed the connection at our hello" % where
            buf += chunk
        line, self.rest = buf.split(b"\n", 1)
        proof = answer(PEERS, self.mn, self.rank, nm, _parse(line))
        if proof is None:
            return "the listener at %s did not prove it knows the run's secret: not heeded" % where
        self.send(sock, proof)
        return None


def keepalive(sock):
    """TCP keepalive on SOCK (KEEP_IDLE_S, KEEP_INTVL_S, KEEP_CNT; Linux's options)."""
    import socket
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, v in (("TCP_KEEPIDLE", KEEP_IDLE_S), ("TCP_KEEPINTVL", KEEP_INTVL_S), ("TCP_KEEPCNT", KEEP_CNT)):
        if hasattr(socket, opt):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), v)


def _sent_whole(c, msg):
    """MSG sent on the non-blocking C in one send, whole (a welcome: a few hundred bytes), or
    False: the connection is closed unheeded then."""
    data = (json_dumps(msg) + "\n").encode()
    try:
        return c.send(data) == len(data)
    except OSError:
        return False


def _describe(ex):
    if not ex:
        return "exit status unknown"
    return "killed by %s" % ex["signal"] if ex.get("signal") else "exit code %s" % ex.get("code")
