"""The CLI's way to an ssh host's resident agent (transport/agentcall.py's split, by concern): which
operations may go there, a forward of the control master to its socket, the record of
tries in cache/far-agents (beside the far sides known to have this agent cached), and
when to stop trying. agent/core/resident.py is the far side of it."""

from __future__ import annotations

import json
import _thread
import os
import sys

from ..cache import cache_path, make_private_dir, read_cache, write_cache
from ..errors import HopFailed, RunwardError
from .exchange import agent_missing, run_call, Replies
from ..targets.sshconf import control_dir, ssh_base
from ..targets.sshresolve import resolved
from ..targets import Target


# Operations that only read: on an ssh target they may be served by the far side's resident
# agent (agent/core/resident.py; docs/protocol.md). Equal to agent.resident.OPS (tested).
RESIDENT_OPS = frozenset(("status", "gpus", "ps", "spec", "health", "hash", "ping", "logs", "nspid", "free_ports",
                           "manifest"))


_RESIDENT_FAILS_MAX = 2  # failed tries in a row before a far side is no longer tried


def single_ssh(target: Target) -> bool:
    """A target whose resident is reachable: an ssh host itself (in a container behind it,
    the resident's socket would be out of sshd's reach)."""
    return len(target.hops) == 1 and target.hops[0].kind == "ssh"


def resident_on() -> bool:
    return os.environ.get("RUNWARD_RESIDENT", "1") != "0"


def _relay_on() -> bool:
    return os.environ.get("RUNWARD_RELAY", "1") != "0"


_RELAY_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "relay.py")
_SPAWNED: list[int] = []  # relays this process started, reaped once they exit (a long-lived caller)
_SPAWNED_LOCK = _thread.allocate_lock()  # (threading's import is not paid for by every CLI)


def _start_relay(listen: str, forward: str, idle: float, conn) -> None:
    """Start the relay for a forward (transport/relay.py), detached, with conn (a kept connection to
    the resident that has just given its reply) as its first. Nothing is waited for; a relay
    that cannot start, or finds one there already, only means the next call pays the
    forward's two round trips."""
    if not sys.executable:
        return  # an embedding interpreter: nothing to run it with
    with _SPAWNED_LOCK:  # calls to several hosts at once, each in a thread (transport/fanout.py)
        for pid in list(_SPAWNED):
            try:
                if not os.waitpid(pid, os.WNOHANG)[0]:
                    continue
            except ChildProcessError:
                pass  # reaped by someone else (the caller's own os.wait())
            _SPAWNED.remove(pid)
    fd = conn.fileno()
    moved = os.dup(fd) if fd == 3 else None  # dup2(3, 3) would leave it close-on-exec
    try:
        pid = os.posix_spawn(
            sys.executable, [sys.executable, "-I", "-S", _RELAY_PY, listen, forward, repr(idle), "3"], {},
            file_actions=[(os.POSIX_SPAWN_DUP2, moved if moved is not None else fd, 3),
                          (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDWR, 0),
                          (os.POSIX_SPAWN_DUP2, 0, 1), (os.POSIX_SPAWN_DUP2, 0, 2)],
            setsid=True)
        with _SPAWNED_LOCK:
            _SPAWNED.append(pid)
    except OSError:
        pass
    finally:
        if moved is not None:
            os.close(moved)


def _relay_of(forward: str) -> str:
    """The relay's socket path for a forward's: <control dir>/p-NAME beside r-NAME."""
    d, base = os.path.split(forward)
    return os.path.join(d, "p" + base[1:])


def _stopped_peer(s) -> bool:
    """Whether the process listening at the other end of unix socket s is stopped (SIGSTOP,
    a debugger, a frozen cgroup): the kernel still queues a connection and its request there,
    and its reply would be waited for without end. (SO_PEERCRED names the listener's pid.)"""
    import _socket
    import struct
    try:
        pid = struct.unpack("3i", s.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12))[0]
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
    except (OSError, ValueError, IndexError, struct.error, AttributeError):
        return False


class Resident:
    """The way to the far side's resident agent, for one call.

    Its state lives in cache/far-agents beside the agent's own lines, keyed by the same
    "<sha256> <far key>": "@<key>\t<name>" records a forward of the control master from
    the local socket <control dir>/r-<name> to the resident's socket there, "@<key>\t!" a
    try that failed. After _RESIDENT_FAILS_MAX failures in a row (forwarding refused by
    sshd, a resident killed each time its session ends) this agent version stops trying
    that far side and every call goes the ordinary way.

    Only read-only operations are sent there, so a try that ends without a reply is made
    again the ordinary way, which also starts a resident again if it is gone."""

    def __init__(self, target: Target, req: dict, payload, entry: str | None, known: list[str]):
        self.target, self.entry, self.known = target, entry, known
        self.forward: str | None = None
        self.stale: str | None = None
        self.fails = 0
        self.way = ""  # "relay" or "forward": how the last reply came
        self.wanted = (entry is not None and payload is None and req["op"] in RESIDENT_OPS and not req.get("follow")
                       and single_ssh(target) and resident_on())
        if not self.wanted:
            return
        self.idle = float(os.environ.get("RUNWARD_RESIDENT_IDLE") or 600)
        prefix = "@" + entry + "\t"
        name = None
        for line in known:
            if line.startswith(prefix):
                state = line[len(prefix):]
                if state == "!":
                    self.fails += 1
                elif state.isalnum():  # a name we made (os.urandom hex): never a path
                    name, self.fails = state, 0
        if self.fails >= _RESIDENT_FAILS_MAX:
            self.wanted = False
        elif name:
            self.forward = os.path.join(control_dir(), "r-" + name)

    def call(self, sha: str, line: bytes, on_event, timeout) -> dict | None:
        """The reply through the relay (transport/relay.py: one round trip), else through the forward
        (two), or None: then the call goes the ordinary way. None where there is no forward
        (the control master is gone: set up again after the call) or where the resident's
        connection ended without a reply (counted as a failure). A connection of the
        forward that ended well is handed to a new relay for the calls after this one."""
        relay = _relay_of(self.forward)
        if _relay_on():
            got = self._talk(relay, b"0 %s\n" % sha.encode() + line, on_event, timeout, relay=True)
            if got is not None and got.reply is not None and not agent_missing(got.reply):
                if self.fails:
                    self._works_again()
                self.way = "relay"
                return got.reply
            if got is not None and got.events:
                raise self._stopped_mid_reply()
        keep = _relay_on()
        got = self._talk(self.forward, b"0 %s%s\n" % (sha.encode(), b" keep" if keep else b"") + line,
                         on_event, timeout, hand_to=relay if keep else None)
        if got is None:
            self.stale, self.forward = self.forward, None
            return None
        # AgentMissing: a resident of another agent version there, not ours to use
        reply = None if agent_missing(got.reply) else got.reply
        if reply is None:
            if got.events:
                raise self._stopped_mid_reply()
            self._master_gone()
            self._record("!")
            self.fails += 1
        elif self.fails:
            self._works_again()
        self.way = "forward"
        return reply

    def relay_listens(self) -> bool:
        """Whether a relay listens for this forward (for doctor; a bare connect, nothing sent)."""
        if not _relay_on():
            return False
        import _socket
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            s.connect(_relay_of(self.forward))
            return True
        except OSError:
            return False
        finally:
            s.close()

    def _works_again(self) -> None:
        """A reply through the forward after failed tries: recorded, the count starts anew."""
        self._record(os.path.basename(self.forward)[2:])

    def _stopped_mid_reply(self) -> HopFailed:
        """What the resident said (events) cannot be taken back by asking again."""
        hop = self.target.hops[0]
        return HopFailed(f"{hop}: the resident agent stopped mid-reply",
                         "retry; with RUNWARD_RESIDENT=0 calls bypass it", hop=str(hop))

    def _talk(self, path: str, data: bytes, on_event, timeout, hand_to: str | None = None,
              relay: bool = False) -> Replies | None:
        """Send data on a connection to the unix socket at path and read what comes until
        the reply; None where it does not connect (relay: or where the relay is stopped).
        hand_to: the relay's path, to hand the connection to once it has given a whole reply
        and nothing after it."""
        import _socket
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            try:
                s.connect(path)
            except OSError:
                return None
            if relay and _stopped_peer(s):
                return None
            s.settimeout(timeout)
            got, buf = Replies(on_event), b""
            try:
                s.sendall(data)
                while got.reply is None and (chunk := s.recv(1 << 16)):
                    *lines, buf = (buf + chunk).split(b"\n")
                    for line in lines:
                        if got.reply is not None:
                            buf = b"?"  # something after the reply: not a connection to keep
                            break
                        if line:  # (an empty line: the resident took a keep head's request)
                            got.take(line)
            except OSError:
                pass
            if hand_to and got.reply is not None and not buf and not got.garbage:
                _start_relay(hand_to, path, self.idle, s)
            return got
        finally:
            s.close()

    def _master_gone(self) -> None:
        """The forward closed without a reply. If the control master carrying it is gone
        too, it ended on its keepalive: the link went silent. Said now, as Unreachable; the
        ordinary way would only wait a connect timeout more on the same dead link."""
        from .diagnosis import link_stopped
        silent = link_stopped(self.target.hops[0])
        if silent is not None:
            raise silent

    def found(self, info: dict) -> None:
        """The ordinary call's agent reports the resident (found alive or started now): set
        up the control master's forward to it, unless the one we have still connects."""
        if self.forward and self.fails and info.get("alive") is False and info.get("ended_idle") is True:
            # the resident our forward found gone had ended on its idle time, not killed nor
            # failed: no failed try. The forward leads to the new one, at the same path.
            self._works_again()
            self.fails = 0
            return
        if self.forward or self.fails >= _RESIDENT_FAILS_MAX:
            return
        remote = info.get("path")
        if not isinstance(remote, str) or not remote.startswith("/") or ":" in remote:
            return
        name = os.urandom(6).hex()
        local = os.path.join(control_dir(), "r-" + name)
        argv = self.target.hops[0].ssh_argv(ssh_base(), ["-O", "forward", "-L", f"{local}:{remote}"])
        try:
            rc = run_call(argv, b"", None, None, None)[0]
        except (RunwardError, OSError):
            return
        if rc == 0:
            self._record(name)
            if self.stale:  # a forward of a master that has exited: its socket file stays,
                # and so do its relay's lock (and its socket, where the relay was killed):
                # one set of files left in the control directory by every master gone
                relay = _relay_of(self.stale)
                for dead in (self.stale, relay, relay + ".lock"):
                    try:
                        os.unlink(dead)
                    except OSError:
                        pass

    def _record(self, state: str) -> None:
        far_remember(f"@{self.entry}\t{state}", self.entry.split(" ", 1)[0], self.known)
        self.known.append(f"@{self.entry}\t{state}")


def far_key(target: Target) -> str | None:
    """Which far side a target reaches, as far as the agent's cache goes: the hop chain, the
    python it runs (a cache file per interpreter version), the home, and what each ssh hop
    resolves to now (targets/sshresolve.py): a re-pointed alias, or one another project's ssh config
    sends elsewhere, is another far side, with a route of its own. None where ssh cannot say
    what a hop resolves to: then nothing kept is used."""
    py = sys.executable if target.is_local else (target.python or os.environ.get("RUNWARD_PYTHON") or "python3")
    ends = [resolved(h) for h in target.hops if h.kind == "ssh"]
    if None in ends:
        return None
    return json.dumps([str(target), py, target.home or "", *ends])


def far_lines() -> list[str]:
    """cache/far-agents: one "<agent sha256> <far key>" line per far side known to have
    that agent cached."""
    return (read_cache(cache_path("far-agents")) or b"").decode("utf-8", "replace").splitlines()


def far_remember(entry: str, sha: str, known: list[str]) -> None:
    """Add entry to cache/far-agents (known: its lines as read before the call): one small
    O_APPEND write, never torn; past 64 KiB the file is rewritten with the lines of this
    agent version only."""
    path = cache_path("far-agents")
    if sum(len(x) + 1 for x in known) > 1 << 16:
        keep = [x for x in known if x.startswith((sha + " ", "@" + sha + " "))] + [entry]
        write_cache(path, "".join(x + "\n" for x in keep).encode())
        return
    try:
        make_private_dir(os.path.dirname(path))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (entry + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass  # a read-only home: the source goes with every call
