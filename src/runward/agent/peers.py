"""A multi-node run's nodes watching each other, kept by the targets, not the CLI
(docs/multinode.md, "Failure propagation").

Node 0's shim runs a small coordinator: a TCP listener on the coordinator port the CLI chose
on node 0 (ops/nodes.py:free_ports). Every other node's shim connects to it (MASTER_ADDR,
that port) and says hello. Messages are JSON lines:

    member -> coordinator   {"hello": RANK, "id": RUN_ID}   {"ended": RANK, "failed": BOOL, "exit": {...}}
    coordinator -> member   {"stop": {"rank": R, "why": TEXT}}   {"ended": 0, "failed": false}

A node whose job ends with a failure (a non-zero exit or a signal, not asked for by `stop`),
or whose connection drops before it said it ended, is a failed node; a member that never
connects within CONNECT_S is one too. With on_node_failure = "stop" (the default) the
coordinator tells every member, and each shim then stops its own job with the verified stop
(terminate.py: its leader first, the grace, KILL, every member checked dead); a
member that loses the coordinator without its "ended" does the same. "continue" only
records what happened. An end asked for by `stop` (stop_requested in the record) is never a
failure: a user's stop of all nodes does not cascade.
"""

import os
import time

from .procfs import protected, scan
from .runs import members
from .terminate import parse_signal, terminate
from .wire import json_dumps, json_loads

CONNECT_S = 120.0   # how long a member tries to reach the coordinator, and it waits for hellos
RETRY_S = 0.5
TELL_S = 5.0        # how long a member's shim waits, its job ended, for its link to say so


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
    link.job_ended({"ended": link.rank, "failed": failed, "exit": ex})
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
        self.sock = None                # member: its connection
        self.end = None                 # member: its "ended" message, once its job ended
        self.told = threading.Event()   # set once the end was said (or there is no one to say it to)
        self.lock = threading.Lock()    # member: the hello, then the end, once each
        self.job_over = threading.Event()
        self.stop_done = threading.Event()
        self.stop_done.set()            # set while no stop of ours is under way
        self.wake_r, self.wake_w = os.pipe()

    # --- both sides

    def run(self):
        """The thread: coordinate (node 0) or follow; an error here is recorded, not lost."""
        try:
            self.coordinate() if self.rank == 0 else self.follow()
        except Exception as e:  # the job runs on; its record says its peers are unwatched
            self.note({"rank": self.rank, "why": "watching the peers failed: %s: %s" % (type(e).__name__, e),
                       "at": time.time()})

    def job_ended(self, msg):
        self.job_over.set()
        if self.rank == 0:
            if msg["failed"]:
                self.node_failed(0, "node 0's job ended: %s" % _describe(msg["exit"]))
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
        if sock is None:
            return False
        try:
            sock.settimeout(5.0)
            sock.sendall((json_dumps(msg) + "\n").encode())
            return True
        except OSError:
            return False

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

    def stop_own(self, rank, why):
        """Our job, stopped as `runward stop` would (run lock, stop_requested, the stop
        signal to every process of the job, the grace, KILL), unless it has ended already."""
        if self.job_over.is_set():
            return
        self.stop_done.clear()
        try:
            self._stop_locked(rank, why)
        finally:
            self.stop_done.set()

    def _stop_locked(self, rank, why):
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

            fates = terminate(found, procs, parse_signal(att.get("stop_signal") or "TERM"),
                              float(att.get("grace", 30.0)), find_more=find_more,
                              group=job.get("pid") if job.get("pid") in found else None)
            left = find_more()
            self.job_over.wait(10.0)  # the shim's main thread records the exit first
            store.update_attempt(self.n, lambda att: att.update(peer_stop={
                "by_node": rank, "why": why, "at": time.time(), "processes": len(fates), "verified_dead": not left}))
        finally:
            store.unlock(fd)

    # --- node 0: the coordinator

    def coordinate(self):
        import socket
        try:
            srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("", int(self.mn["coord_port"])))
            srv.listen(64)
        except OSError as e:
            self.note({"rank": 0, "why": "the coordinator could not listen on port %s: %s"
                       % (self.mn["coord_port"], e), "at": time.time()})
            return
        self._serve(srv)

    def _serve(self, srv):
        import select
        bufs, said_end = {}, set()
        deadline = time.monotonic() + CONNECT_S  # None once every member said hello
        while not self.job_over.is_set():
            if deadline is not None and len(self.conns) >= self.nnodes - 1:
                deadline = None
            elif deadline is not None and time.monotonic() >= deadline:
                missing = sorted(set(range(1, self.nnodes)) - set(self.conns))
                self.node_failed(missing[0], "node %d never reached the coordinator" % missing[0])
                deadline = None
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = select.select([srv, self.wake_r] + list(bufs), [], [], wait)[0]
            for s in ready:
                if s is srv:
                    c, _ = srv.accept()
                    bufs[c] = b""
                elif s is not self.wake_r:
                    self._read_member(s, bufs, said_end)

    def _read_member(self, s, bufs, said_end):
        try:
            chunk = s.recv(65536)
        except OSError:
            chunk = b""
        rank = next((r for r, c in self.conns.items() if c is s), None)
        if not chunk:
            del bufs[s]
            s.close()
            if rank is not None and rank not in said_end:
                self.node_failed(rank, "lost the connection to node %d" % rank)
            return
        bufs[s] += chunk
        while b"\n" in bufs[s]:
            line, bufs[s] = bufs[s].split(b"\n", 1)
            msg = _parse(line)
            if rank is None:  # a connection speaks only after its hello with this run's id
                if msg.get("id") != self.mn.get("id") or msg.get("hello") not in range(1, self.nnodes):
                    del bufs[s]
                    s.close()
                    return
                rank = int(msg["hello"])
                self.conns[rank] = s
            elif "ended" in msg and int(msg["ended"]) == rank:
                said_end.add(int(msg["ended"]))
                if msg.get("failed"):
                    self.node_failed(int(msg["ended"]), "node %s's job ended: %s"
                                     % (msg["ended"], _describe(msg.get("exit"))))

    def broadcast(self, msg):
        for c in list(self.conns.values()):
            self.send(c, msg)

    # --- the other nodes: members

    def follow(self):
        sock = self._connect()
        if sock is None:
            self.told.set()
            if not self.job_over.is_set():
                self.node_failed(0, "could not reach node 0's coordinator at %s:%s"
                                 % (self.mn.get("master_addr"), self.mn.get("coord_port")))
            return
        with self.lock:
            self.send(sock, {"hello": self.rank, "id": self.mn.get("id")})
            self.sock = sock
            if self.end is not None:  # the job ended before we got here: say so now
                self.send(sock, self.end)
                self.told.set()
        buf, done = b"", False
        while not done:
            try:
                sock.settimeout(None)
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = _parse(line)
                if "stop" in msg:
                    self.note(dict(msg["stop"], at=time.time(), told_by=0))
                    if self.policy == "stop":
                        self.stop_own(msg["stop"].get("rank"), msg["stop"].get("why"))
                elif "ended" in msg:
                    done = True
        if not done and not self.job_over.is_set():
            self.node_failed(0, "lost the connection to node 0's coordinator")

    def _connect(self):
        """A connection to node 0's coordinator, tried until CONNECT_S, on after our job
        ended too: its end must still be said (the shim waits TELL_S for that, then exits)."""
        import socket
        addr = (self.mn.get("master_addr"), int(self.mn["coord_port"]))
        deadline = time.monotonic() + CONNECT_S
        while time.monotonic() < deadline:
            try:
                return socket.create_connection(addr, timeout=5.0)
            except OSError:
                time.sleep(RETRY_S)
        return None


def _parse(line):
    """One message, or {} for a line that is not a JSON object (ignored)."""
    try:
        msg = json_loads(line.decode("utf-8", "replace"))
    except Exception:  # json's ValueError, or the minimal codec's own
        return {}
    return msg if isinstance(msg, dict) else {}


def _describe(ex):
    if not ex:
        return "exit status unknown"
    return "killed by %s" % ex["signal"] if ex.get("signal") else "exit code %s" % ex.get("code")
