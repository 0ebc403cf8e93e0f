"""How a link to node 0 begins: the one secret-proved handshake of a multi-node run, spoken by
the peers link (supervise/peers.py: a node's failure stops the others) and by the GPU gate of a
restart (supervise/gatebarrier.py). Each side proves it knows the run's secret (the record's
multinode.secret, never shown) before the other heeds it: HMAC-SHA256 over both sides'
nonces, a different text each way, and a different text for each use (a Realm), so that a
proof of one is never one of the other. JSON lines:

    member -> node 0   {HELLO: RANK, "id": RUN_ID, "nonce": NM}      HELLO: "hello" or "gate"
    node 0 -> member   {"welcome": RANK, "nonce": NC, "proof": MAC(COORDINATOR, RANK, NM, NC)}
    member -> node 0   {"proof": MAC(MEMBER, RANK, NM, NC)}

MAC(ROLE, ...) = HMAC-SHA256(secret, "TAG ROLE RUN_ID RANK NM NC"). A connection that has not
proved itself within HELLO_S is closed, as is one whose line before that runs past
HELLO_LINE; at most MAX_PENDING wait at once (each side's loop keeps these bounds). The
listener on node 0 is listen()'s, on the run's coordinator port.
"""

import errno
import os

from .wire import json_dumps, json_loads

HELLO_S = 5.0       # a connection not proved by then is closed (either side)
MAX_PENDING = 64    # connections not proved yet, at once: the oldest is closed to make room
HELLO_LINE = 1024   # the longest line before a connection proved itself
LINE = 65536        # the longest line after
PROVED, WAITING, CLOSE = "proved", "waiting", "close"  # handshake()'s answers


class Realm(object):
    """One use of the handshake: the word its hello is keyed by, and the words of its MACs."""

    def __init__(self, hello, tag, coordinator, member):
        self.hello, self.tag = hello, tag
        self.roles = {"coordinator": coordinator, "member": member}


PEERS = Realm("hello", "runward-peers", "coordinator", "member")
GATE = Realm("gate", "runward-gate", "gate-coordinator", "gate-member")


def mac(realm, mn, role, rank, nm, nc):
    """The proof that ROLE ("coordinator" or "member") knows the run's secret, bound to this
    hello's two nonces."""
    key = (mn.get("secret") or mn.get("id") or "").encode()
    text = "%s %s %s %s %s %s" % (realm.tag, realm.roles[role], mn.get("id"), rank, nm, nc)
    return _hmac(key, text.encode())


def hello(realm, mn, rank):
    """(the member's hello, its nonce NM)."""
    nm = os.urandom(16).hex()
    return {realm.hello: rank, "id": mn.get("id"), "nonce": nm}, nm


def welcome(realm, mn, msg):
    """Node 0's answer to MSG: (the handshake's state {"rank", "nm", "nc"}, the welcome with
    our proof), or None unless MSG is this run's hello from a member rank."""
    nm, rank = msg.get("nonce"), msg.get(realm.hello)
    if msg.get("id") != mn.get("id") or type(rank) is not int or rank not in range(1, int(mn["nnodes"])) \
            or not isinstance(nm, str) or not 16 <= len(nm) <= 128:
        return None
    st = {"rank": rank, "nm": nm, "nc": os.urandom(16).hex()}
    return st, {"welcome": rank, "nonce": st["nc"], "proof": mac(realm, mn, "coordinator", rank, nm, st["nc"])}


def proved(realm, mn, st, msg):
    """Whether MSG is the member's proof for the handshake ST (welcome's)."""
    return same(msg.get("proof"), mac(realm, mn, "member", st["rank"], st["nm"], st["nc"]))


def handshake(realm, mn, st, chunk, send):
    """Node 0's side of a connection not proved yet: CHUNK, its next bytes (b"" at EOF), fed
    to its state ST ({"buf": b""} to begin). Its hello is answered with our proof (send(msg)
    -> whether it went), then its proof is checked. PROVED: ST's rank says who (ST["buf"]
    holds what came after the proof); WAITING for more; CLOSE, unheeded: EOF, a line that is
    neither, a welcome that could not be sent, or a line past HELLO_LINE."""
    st["buf"] += chunk
    while chunk and b"\n" in st["buf"]:
        line, st["buf"] = st["buf"].split(b"\n", 1)
        msg = parse(line)
        if "nc" not in st:
            got = welcome(realm, mn, msg)
            if got is not None:
                st.update(got[0])
            chunk = b"x" if got is not None and send(got[1]) else b""
        elif proved(realm, mn, st, msg):
            return PROVED
        else:
            chunk = b""
    return CLOSE if not chunk or len(st["buf"]) > HELLO_LINE else WAITING


def answer(realm, mn, rank, nm, msg):
    """The member's proof for node 0's welcome MSG to our hello (nonce NM), or None where
    the welcome does not prove that node 0 knows the secret (not heeded then)."""
    if not same(msg.get("proof"), mac(realm, mn, "coordinator", rank, nm, msg.get("nonce"))):
        return None
    return {"proof": mac(realm, mn, "member", rank, nm, msg.get("nonce"))}


def listen(mn):
    """The listener, on MASTER_ADDR (the address the members use) where it is one of
    ours, else on every address: a stranger cannot take the members' address:port
    from under us, nor we be reached through addresses nobody uses."""
    import socket
    port = int(mn["coord_port"])
    for host in [h for h in (mn.get("master_addr"), "") if h is not None]:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind((host, port))
        except OSError as e:
            srv.close()
            if host and (isinstance(e, socket.gaierror) or e.errno == errno.EADDRNOTAVAIL):
                continue  # not an address of this node (NAT, a name): every address then
            raise OSError("the coordinator could not listen on %s:%s: %s" % (host or "*", port, e))
        srv.listen(64)
        srv.setblocking(False)
        return srv


def send_line(sock, msg):
    """MSG as one JSON line on SOCK, whole, waiting 5 s at most; False where it could not go
    (the link is gone: each side says what that means)."""
    try:
        sock.settimeout(5.0)
        sock.sendall((json_dumps(msg) + "\n").encode())
        return True
    except OSError:
        return False


def parse(line):
    """One message, or {} for a line that is not a JSON object (ignored)."""
    try:
        msg = json_loads(line.decode("utf-8", "replace"))
    except Exception:  # json's ValueError, or the minimal codec's own
        return {}
    return msg if isinstance(msg, dict) else {}


def same(given, want):
    """given == want in a time that does not depend on where they differ."""
    if not isinstance(given, str) or len(given) != len(want):
        return False
    diff = 0
    for x, y in zip(given.encode("utf-8", "replace"), want.encode()):
        diff |= x ^ y
    return diff == 0


def _hmac(key, msg):
    """HMAC-SHA256 (RFC 2104), hex; hashlib only (python3-minimal's hmac is not relied on)."""
    import hashlib
    if len(key) > 64:
        key = hashlib.sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in key) + msg).digest()
    return hashlib.sha256(bytes(b ^ 0x5c for b in key) + inner).hexdigest()
