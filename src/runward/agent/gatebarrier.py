"""The GPU gate of a multi-node `restart` (docs/supervision.md, "restart: blocked"): no node
starts its job until every node's GPUs are released. One node's job started alone would sit
in its rendezvous, time out there, and fail the run; the blocked node would then start later
into nothing. So each node's shim, its own GPUs released (gatewait.py), waits here for the
others, and all start together.

Node 0's shim listens on the run's coordinator port (peers.listen: the one the job's peers
link takes over once the jobs run); every other node's shim connects to it once its own GPUs
are free, and both prove they know the run's secret, as peers.py does, with other words in
the MAC (a proof here is never one there):

    member -> node 0   {"gate": RANK, "id": RUN_ID, "nonce": NM}
    node 0 -> member   {"welcome": RANK, "nonce": NC, "proof": MAC("gate-coordinator", ...)}
    member -> node 0   {"proof": MAC("gate-member", ...)}        (my GPUs are released)
    node 0 -> member   {"go": RANK}                              (every node's are)

A member's proof is its "released"; once node 0 holds one from every member (and its own
GPUs are free) it says go to each and closes the listener. A member whose connection drops
before that (it was cancelled, its link went down) is waited for again. Each side reads the
stop's mark (on_poll) at least every POLL_S: `runward stop` cancels a node waiting here as it
cancels one waiting for its own GPUs. There is no timeout: a blocked run waits until it is
released or stopped, never "proceeds anyway"."""

import os
import time

from .peers import HELLO_LINE, HELLO_S, _hmac, _parse, _same, listen
from .wire import json_dumps

POLL_S = 0.5


def wait(mn, on_poll):
    """Return once every node of the run said its GPUs are released (node 0: it heard every
    member; a member: node 0 said go). on_poll() may raise to end the wait (a stop)."""
    if int(mn.get("nnodes") or 1) < 2 or not mn.get("coord_port"):
        return
    (_coordinate if int(mn["rank"]) == 0 else _follow)(mn, on_poll)


def _mac(mn, role, rank, nm, nc):
    key = (mn.get("secret") or mn.get("id") or "").encode()
    return _hmac(key, ("runward-gate %s %s %s %s %s" % (role, mn.get("id"), rank, nm, nc)).encode())


# --- node 0

def _coordinate(mn, on_poll):
    import selectors
    srv = _bound(mn, on_poll)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ, None)
    conns = {}  # socket -> {"buf", "until", "rank", "nm", "nc", "proved"}
    try:
        while len([c for c in conns.values() if c.get("proved")]) < int(mn["nnodes"]) - 1:
            on_poll()
            for key, _ in sel.select(POLL_S):
                if key.data is None:
                    _accept(srv, sel, conns)
                else:
                    _read(mn, key.fileobj, sel, conns)
            now = time.monotonic()
            for c in [c for c, st in conns.items() if not st.get("proved") and st["until"] < now]:
                _drop(c, sel, conns)
        for c, st in conns.items():
            _send(c, {"go": st["rank"]})
    finally:
        for c in list(conns):
            _drop(c, sel, conns)
        sel.close()
        srv.close()


def _bound(mn, on_poll):
    """The listener; a port held by another process meanwhile is tried again each poll."""
    while True:
        try:
            return listen(mn)
        except OSError:
            on_poll()
            time.sleep(POLL_S)


def _accept(srv, sel, conns):
    import selectors
    try:
        c, _ = srv.accept()
    except OSError:
        return
    c.setblocking(False)
    conns[c] = {"buf": b"", "until": time.monotonic() + HELLO_S}
    sel.register(c, selectors.EVENT_READ, "conn")


def _read(mn, c, sel, conns):
    """A hello (answered with our proof), then the member's proof; a proved member that
    closes its connection (cancelled) is no longer counted. Anything else closes it."""
    st = conns[c]
    try:
        chunk = c.recv(4096)
    except OSError:
        chunk = b""
    st["buf"] += chunk
    while chunk and b"\n" in st["buf"] and not st.get("proved"):
        line, st["buf"] = st["buf"].split(b"\n", 1)
        msg = _parse(line)
        if "nc" not in st:
            chunk = _welcome(mn, c, st, msg)
        elif _same(msg.get("proof"), _mac(mn, "gate-member", st["rank"], st["nm"], st["nc"])) \
                and not any(o.get("proved") and o["rank"] == st["rank"] for o in conns.values()):
            st["proved"] = True
        else:
            chunk = b""
    if not chunk or len(st["buf"]) > HELLO_LINE:
        _drop(c, sel, conns)


def _welcome(mn, c, st, msg):
    nm = msg.get("nonce")
    if msg.get("id") != mn.get("id") or type(msg.get("gate")) is not int \
            or msg["gate"] not in range(1, int(mn["nnodes"])) or not isinstance(nm, str) or not 16 <= len(nm) <= 128:
        return b""
    st.update(rank=msg["gate"], nm=nm, nc=os.urandom(16).hex())
    ok = _send(c, {"welcome": st["rank"], "nonce": st["nc"], "proof": _mac(mn, "gate-coordinator", st["rank"], nm, st["nc"])})
    return b"x" if ok else b""


def _drop(c, sel, conns):
    conns.pop(c, None)
    try:
        sel.unregister(c)
    except (KeyError, ValueError):
        pass
    c.close()


def _send(c, msg):
    try:
        c.settimeout(5.0)
        c.sendall((json_dumps(msg) + "\n").encode())
        return True
    except OSError:
        return False


# --- the other nodes

def _follow(mn, on_poll):
    """Connect to node 0, prove ourselves (our GPUs are released), and wait for its go; a
    listener that does not prove it knows the secret is never heeded; a dropped link is
    tried again."""
    import socket
    addr, rank = (mn.get("master_addr"), int(mn["coord_port"])), int(mn["rank"])
    while True:
        on_poll()
        try:
            sock = socket.create_connection(addr, timeout=POLL_S * 4)
        except OSError:
            time.sleep(POLL_S)
            continue
        try:
            rest = _handshake(mn, sock, rank, on_poll)
            if rest is not None and _go(sock, rest, rank, on_poll):
                return
        finally:
            sock.close()
        time.sleep(POLL_S)


def _handshake(mn, sock, rank, on_poll):
    """What came after node 0's proven welcome (we sent our proof), or None."""
    nm = os.urandom(16).hex()
    if not _send(sock, {"gate": rank, "id": mn.get("id"), "nonce": nm}):
        return None
    buf = _line(sock, b"", time.monotonic() + HELLO_S, on_poll)
    if buf is None:
        return None
    line, rest = buf.split(b"\n", 1)
    msg = _parse(line)
    if not _same(msg.get("proof"), _mac(mn, "gate-coordinator", rank, nm, msg.get("nonce"))):
        return None
    return rest if _send(sock, {"proof": _mac(mn, "gate-member", rank, nm, msg.get("nonce"))}) else None


def _go(sock, buf, rank, on_poll):
    """True once node 0 says go to us; False when the link drops first."""
    while True:
        buf = _line(sock, buf, None, on_poll)
        if buf is None:
            return False
        line, buf = buf.split(b"\n", 1)
        if _parse(line).get("go") == rank:
            return True


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
