"""Run the agent through a hop chain, one round trip per operation, and diagnose failures.

The agent's command line is a fixed bootstrap (agent.boot.BOOTSTRAP); the agent blob, the
request and any payload (file bytes) travel on stdin. A call that does not end in the
agent's JSON reply is classified (ssh could not connect, container absent or stopped,
python3 missing, the far side killed by a signal, a reply that is not JSON) into an error
that names the hop, says why, and gives a hint: "no output" is never an answer.
"""

from __future__ import annotations

import _thread
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable

from .agent import boot as _boot
from .errors import AgentError, BadInput, HopFailed, RunwardError, Unreachable, from_agent
from .cache import cache_path, local_home, make_private_dir, read_cache, write_cache
from .targets import Hop, Target

_AGENT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent")
_SHA: str | None = None
_SOURCE: tuple[bytes, str] | None = None
# held while either is made: the threads of a multi-node call ask at once, and each reading,
# hashing or compressing the files again costs CPU the other nodes' calls need
_ONCE = _thread.allocate_lock()


def agent_sha() -> str:
    """The sha256 that names the agent package's blob (most calls send it alone). Kept in a
    0600 file of the local cache with the files' inode, size and mtime, checked on every
    call: reading and hashing the files (and importing hashlib) costs a status about 4 ms
    more than listing them and reading one file (bench/startup.py, -X importtime)."""
    global _SHA
    with _ONCE:
        if _SHA is None:
            _SHA = _read_sha()
    return _SHA


def _read_sha() -> str:
    sig = _AGENT_DIR + "\n" + "".join(f"{rel} {st.st_ino} {st.st_size} {st.st_mtime_ns}\n" for rel, st in _agent_files())
    path = cache_path("blob-sha")
    sha, _, rest = (read_cache(path) or b"").decode("utf-8", "replace").partition("\n")
    if len(sha) != 64 or rest != sig:  # missing, torn, or the tree changed
        sha = _boot.read_blob(_AGENT_DIR)[1]
        write_cache(path, f"{sha}\n{sig}".encode())
    return sha


def _agent_files() -> list[tuple[str, os.stat_result]]:
    return [(rel, os.stat(os.path.join(_AGENT_DIR, rel))) for rel in _boot.sources(_AGENT_DIR)]


def agent_source() -> tuple[bytes, str]:
    """The agent package as one blob, zlib-compressed (a quarter of the size on a slow
    link), and its sha256 (the far side caches the compiled code by it); compressed only
    when a call sends it (agent.boot.build_blob)."""
    global _SOURCE
    with _ONCE:
        if _SOURCE is None:
            _SOURCE = _boot.build_blob(_AGENT_DIR)
    return _SOURCE


def ssh_base(connect_timeout: float | None = None) -> list[str]:
    """The system OpenSSH client (so ~/.ssh/config, agents and ProxyJump work) in batch
    mode, multiplexed through a control socket in a 0700 directory of runward's own."""
    sockdir = control_dir()
    timeout = connect_timeout or float(os.environ.get("RUNWARD_CONNECT_TIMEOUT", "10"))
    base = ["ssh", "-T",
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={int(max(1, timeout))}",
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={sockdir}/%C",
            "-o", f"ControlPersist={os.environ.get('RUNWARD_CONTROL_PERSIST', '300')}",
            *ssh_alive_options(),
            "-o", "LogLevel=ERROR"]
    cfg = os.environ.get("RUNWARD_SSH_CONFIG")
    if cfg:
        base[1:1] = ["-F", cfg]
    return base


def ssh_alive_options() -> list[str]:
    """A link that went silent (cable, VPN, a host frozen) is found within the alive timeout
    (RUNWARD_SSH_ALIVE_TIMEOUT, runward.toml's [ssh] alive_timeout; default 15 s) by the ssh
    keepalive: ssh probes after an interval of silence and gives up when three more went
    unanswered, so at 4 intervals. The control master started with these options carries
    every later call, so this bounds a call on a dead link too (before: 15 s x 3 + TCP's own
    retries, ~70 s). The fifth interval is the connect that ssh's own mux client tries when
    its master ends under it (targets/ssh.py caps ConnectTimeout to one interval while a
    master is up), so T = 5 intervals bounds every call. targets/ssh.py drops these options
    for a destination whose own ssh config is stricter."""
    try:
        total = float(os.environ.get("RUNWARD_SSH_ALIVE_TIMEOUT") or 15)
    except ValueError:
        total = 15.0
    interval = max(1, round(max(3.0, total) / 5))
    return ["-o", f"ServerAliveInterval={interval}", "-o", "ServerAliveCountMax=3"]


# On a remote target the agent runs under a small sh that names the signal if the agent is
# killed: OpenSSH turns a remote death by signal into a bare exit 255 with no message, the
# same as a dropped connection, and "no output" must never be the answer.
_REPORT_SIGNAL = ('"$@"; s=$?; if [ $s -gt 128 ] && [ $s -lt 192 ]; then '
                  'echo "runward: the agent was killed by signal $((s-128))" >&2; fi; exit $s')
# patterns are compiled on first use (re caches them): most calls never diagnose
_KILLED_PAT = r"runward: the agent was killed by signal (\d+)"


def control_dir() -> str:
    """A 0700 directory of our own for ssh control sockets. A unix socket path must fit in
    108 bytes, and a socket's name is 9 (the destination's tag, targets/ssh.py) + 40 (%C)
    plus ssh's temporary suffix of 17, so a long home falls back to a short directory under
    /tmp, named after the home, checked to be ours."""
    home = local_home()
    d = os.path.join(home, "ssh")
    if len(d) > 39:
        import hashlib
        d = os.path.join("/tmp", f"runward-{os.getuid()}-{hashlib.sha1(home.encode()).hexdigest()[:10]}")
    try:
        make_private_dir(d)
    except OSError as e:
        raise BadInput(f"cannot create the ssh control directory {d}: {e.strerror}", "check RUNWARD_HOME")
    st = os.lstat(d)
    if st.st_uid != os.getuid() or (st.st_mode & 0o077) or not os.path.isdir(d) or os.path.islink(d):
        raise BadInput(f"ssh control directory {d} is not ours or is open to others",
                       f"remove it (rm -r {d}) and retry; runward recreates it with mode 0700")
    return d


def agent_argv(target: Target) -> list[str]:
    # -S: the agent is stdlib only; skipping site saves a good part of its start-up
    if target.is_local:
        return [sys.executable, "-S", "-c", _boot.BOOTSTRAP]
    py = target.python or os.environ.get("RUNWARD_PYTHON") or "python3"
    inner = ["/bin/sh", "-c", _REPORT_SIGNAL, "runward-agent", py, "-S", "-c", _boot.BOOTSTRAP]
    return target.wrap(inner, ssh_base())


# Names whose values this process sends in a request (`--env NAME` took them from our own
# environment): kept out of every child we start, so neither the local agent nor an ssh
# ControlMaster (which outlives the call by ControlPersist) carries a second copy.
HIDDEN_ENV: set[str] = set()


def child_environ() -> dict:
    if not HIDDEN_ENV:
        return os.environ
    return {k: v for k, v in os.environ.items() if k not in HIDDEN_ENV}


class RawResult:
    __slots__ = ("argv", "returncode", "stdout_lines", "stderr", "duration_s")

    def __init__(self, argv, returncode, stdout_lines, stderr, duration_s):
        self.argv, self.returncode, self.stdout_lines = argv, returncode, stdout_lines
        self.stderr, self.duration_s = stderr, duration_s


# Operations that only read: on an ssh target they may be served by the far side's resident
# agent (agent/resident.py; docs/protocol.md). Equal to agent.resident.OPS (tested).
_RESIDENT_OPS = frozenset(("status", "gpus", "ps", "spec", "health", "hash", "ping", "logs", "nspid", "free_ports",
                           "manifest"))
# Operations that follow until their window ends, or for ever (logs with "follow"): their
# stdin is held open until the reply, and the agent ends them when it closes (the CLI
# interrupted or killed, its ssh or podman killed, the link dropped: every hop passes the EOF
# on). A follower left running in a container is a process runward leaked.
_FOLLOWS = frozenset(("watch",))
# Ops whose far side goes on to its end without us (the agent's wire.outlive_caller): on
# Ctrl-C the call's child is neither killed nor waited for. A local stop's child is the agent
# itself, and a stop (or a kill --yes) interrupted after its TERM still owes the KILL after the grace.
_OUTLIVE = frozenset(("stop", "kill"))
_RESIDENT_FAILS_MAX = 2  # failed tries in a row before a far side is no longer tried
LAST_ROUTE = ""  # how the last call reached its agent: "resident" or "exec" (for tests)


def call(target: Target, request: dict, *, payload: Iterable[bytes] | None = None,
         on_event: Callable[[dict], None] | None = None, timeout: float | None = None,
         on_data: Callable[[bytes], None] | None = None,
         late: Callable[[dict], None] | None = None) -> dict:
    """One round trip: send the agent and the request, return the agent's result dict.
    Raises a RunwardError subclass that says which hop failed and why.

    The agent's ~40 KB travel only while the far side may lack them: once a target has run
    this agent (and cached it), calls send its sha256 alone. On a link whose TCP window has
    gone cold that saves one or two round trips. If the far side lost its cache, its one
    reply is AgentMissing, nothing has run, and the call is made again with the source.

    A read-only call to an ssh host goes first to the host's resident agent, if there is a
    way to it (_Resident); where that gives no reply it is made the ordinary way.

    on_data takes the binary an op sends back (pull): after an event line {"data": N}, the
    next N bytes of stdout, handed on in pieces of at most 1 MiB as they arrive. A handler
    (on_event, on_data) that raises ends the far side at once.

    late(request) completes the request in place just before it is sent: the far side's
    agent starts meanwhile (its ssh session, its Python, the agent from its cache), for a
    request that waits on something else (a multi-node start on its probe of every node).
    If late raises, the far side is sent no request (it runs nothing) and the error is
    raised here."""
    global LAST_ROUTE
    req = dict(request)
    req.setdefault("v", _boot.PROTOCOL)
    if target.slurm is not None:  # its partition and sbatch options go with every request
        from .targets import slurm
        req = slurm.request(target, req)
    if target.home and "home" not in req:
        req["home"] = target.home
    sha = agent_sha()
    known = _far_lines()
    entry = f"{sha} {_far_key(target)}"
    resident = _Resident(target, req, payload, entry, known)
    if resident.forward:
        reply = resident.call(b"0 %s\n" % sha.encode() + json.dumps(req).encode() + b"\n", on_event, timeout)
        if reply is not None:
            LAST_ROUTE = "resident"
            if reply.get("ok"):
                return reply["result"]
            raise from_agent(reply.get("error") or {}, hop=str(target.hops[-1]))
    if resident.wanted:
        req["resident"] = {"idle": resident.idle}
    LAST_ROUTE = "exec"
    argv = agent_argv(target)
    held = payload is None and (bool(req.get("follow")) or req["op"] in _FOLLOWS)
    if held:
        req["stdin_held"] = True
    body = None if late is not None else json.dumps(req).encode() + b"\n"

    def completed() -> bytes:
        nonlocal body
        if body is None:
            late(req)
            body = json.dumps(req).encode() + b"\n"
        return body
    # a payload is a stream that cannot be sent twice: it never risks the retry
    send_src = payload is not None or entry not in known
    while True:
        agent = agent_source()[0] if send_src else b""
        head = b"%d %s\n" % (len(agent), sha.encode()) + agent
        t0 = time.monotonic()
        rc, garbage, reply, stderr = _exchange(argv, head + (body or b""), payload, on_event, timeout, on_data,
                                               held, completed if body is None else None, req["op"] in _OUTLIVE)
        if not send_src and _agent_missing(reply):
            send_src = True
            continue
        break
    raw = RawResult(argv, rc, garbage, stderr, time.monotonic() - t0)
    if reply is not None:
        if send_src and entry not in known and not reply.get("uncached"):
            _far_remember(entry, sha, known)
        if resident.wanted and isinstance(reply.get("resident"), dict):
            resident.found(reply["resident"])
        if reply.get("ok"):
            return reply["result"]
        raise from_agent(reply.get("error") or {}, hop=str(target.hops[-1]) if target.hops else "local")
    raise diagnose(target, raw)


def _single_ssh(target: Target) -> bool:
    """A target whose resident is reachable: an ssh host itself (in a container behind it,
    the resident's socket would be out of sshd's reach)."""
    return len(target.hops) == 1 and target.hops[0].kind == "ssh"


def _resident_on() -> bool:
    return os.environ.get("RUNWARD_RESIDENT", "1") != "0"


def resident_route(target: Target) -> str | None:
    """How this CLI reaches the target's resident agent (for doctor): "forward" (a forward
    of the control master is recorded), "not yet" (the next read-only call starts or finds
    it), "given up" (two failed tries in a row with this agent version), "off"
    (RUNWARD_RESIDENT=0); None where there is none (not a single ssh hop)."""
    if not _single_ssh(target):
        return None
    if not _resident_on():
        return "off"
    r = _Resident(target, {"op": "status"}, None, f"{agent_sha()} {_far_key(target)}", _far_lines())
    return "forward" if r.forward else "given up" if not r.wanted else "not yet"


class _Resident:
    """The way to the far side's resident agent, for one call.

    Its state lives in cache/far-agents beside the agent's own lines, keyed by the same
    "<sha256> <far key>": "@<key>\t<name>" records a forward of the control master from
    the local socket <control dir>/r-<name> to the resident's socket there, "@<key>\t!" a
    try that failed. After _RESIDENT_FAILS_MAX failures in a row (forwarding refused by
    sshd, a resident killed each time its session ends) this agent version stops trying
    that far side and every call goes the ordinary way.

    Only read-only operations are sent there, so a try that ends without a reply is made
    again the ordinary way, which also starts a resident again if it is gone."""

    def __init__(self, target: Target, req: dict, payload, entry: str, known: list[str]):
        self.target, self.entry, self.known = target, entry, known
        self.forward: str | None = None
        self.stale: str | None = None
        self.fails = 0
        self.wanted = (payload is None and req["op"] in _RESIDENT_OPS and not req.get("follow")
                       and _single_ssh(target) and _resident_on())
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

    def call(self, data: bytes, on_event, timeout) -> dict | None:
        """The reply through the forward, or None (then the call goes the ordinary way):
        no forward (the control master is gone: set up again after the call), or a
        connection that ended without a reply (counted as a failure)."""
        import _socket
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            try:
                s.connect(self.forward)
            except OSError:
                self.stale, self.forward = self.forward, None
                return None
            s.settimeout(timeout)
            got, buf = _Replies(on_event), b""
            try:
                s.sendall(data)
                while chunk := s.recv(1 << 16):
                    *lines, buf = (buf + chunk).split(b"\n")
                    for line in lines:
                        got.take(line)
            except OSError:
                pass
            # AgentMissing: a resident of another agent version there, not ours to use
            reply = None if _agent_missing(got.reply) else got.reply
            if reply is None:
                if got.events:  # what it said cannot be taken back by asking again
                    raise HopFailed(f"{self.target.hops[0]}: the resident agent stopped mid-reply",
                                    "retry; with RUNWARD_RESIDENT=0 calls bypass it", hop=str(self.target.hops[0]))
                self._master_gone()
                self._record("!")
                self.fails += 1
            elif self.fails:
                self._record(os.path.basename(self.forward)[2:])  # it works again
            return reply
        finally:
            s.close()

    def _master_gone(self) -> None:
        """The forward closed without a reply. If the control master carrying it is gone
        too, it ended on its keepalive: the link went silent. Said now, as Unreachable; the
        ordinary way would only wait a connect timeout more on the same dead link."""
        hop = self.target.hops[0]
        try:
            rc = _exchange(hop.ssh_argv(ssh_base(), ["-O", "check"]), b"", None, None, 10)[0]
        except (RunwardError, OSError):
            return
        if rc != 0:
            every = int(ssh_alive_options()[1].split("=")[1])
            raise Unreachable(f"{hop}: the ssh link stopped answering (silent for {every} s, then 3 "
                              f"keepalives {every} s apart went unanswered): link down or host frozen",
                              "check the network to the host; runward status tries again with a new "
                              "connection (RUNWARD_SSH_ALIVE_TIMEOUT / [ssh] alive_timeout set the wait)",
                              hop=str(hop))

    def found(self, info: dict) -> None:
        """The ordinary call's agent reports the resident (found alive or started now): set
        up the control master's forward to it, unless the one we have still connects."""
        if self.forward or self.fails >= _RESIDENT_FAILS_MAX:
            return
        remote = info.get("path")
        if not isinstance(remote, str) or not remote.startswith("/") or ":" in remote:
            return
        name = os.urandom(6).hex()
        local = os.path.join(control_dir(), "r-" + name)
        argv = self.target.hops[0].ssh_argv(ssh_base(), ["-O", "forward", "-L", f"{local}:{remote}"])
        try:
            rc = _exchange(argv, b"", None, None, None)[0]
        except (RunwardError, OSError):
            return
        if rc == 0:
            self._record(name)
            if self.stale:  # a forward of a master that has exited: its socket file stays
                try:
                    os.unlink(self.stale)
                except OSError:
                    pass

    def _record(self, state: str) -> None:
        _far_remember(f"@{self.entry}\t{state}", self.entry.split(" ", 1)[0], self.known)
        self.known.append(f"@{self.entry}\t{state}")


def _far_key(target: Target) -> str:
    """Which far side a target reaches, as far as the agent's cache goes: the hop chain, the
    python it runs (a cache file per interpreter version) and the home."""
    py = sys.executable if target.is_local else (target.python or os.environ.get("RUNWARD_PYTHON") or "python3")
    return json.dumps([str(target), py, target.home or ""])


def _far_lines() -> list[str]:
    """cache/far-agents: one "<agent sha256> <far key>" line per far side known to have
    that agent cached."""
    return (read_cache(cache_path("far-agents")) or b"").decode("utf-8", "replace").splitlines()


def _far_remember(entry: str, sha: str, known: list[str]) -> None:
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


def _exchange(argv, head, payload, on_event, timeout, on_data=None, held=False, late_body=None, outlive=False):
    try:
        proc = Spawned(argv)
    except FileNotFoundError as e:
        raise HopFailed(f"cannot run {argv[0]!r} on this machine: {e.strerror}",
                        f"install {argv[0]} or put it on PATH", hop="local")
    if late_body is not None:  # the agent starts on what it has; the request follows (call's late)
        try:
            proc.stdin.write(head)
            proc.stdin.flush()
        except OSError:
            pass  # the far side went away (or refused the hash alone): its reply says which
        try:
            head = late_body()
        except BaseException:
            proc.kill()  # before any request: the far side runs nothing
            proc.wait()
            proc.stderr_bytes()
            raise
    writer = None
    if payload is None:
        # The agent reads its whole input before it writes a byte, so a plain write cannot
        # deadlock here; a thread is only needed to stream a payload while we read.
        _feed(proc.stdin, head, None, held)
    else:
        import threading
        writer = threading.Thread(target=_feed, args=(proc.stdin, head, payload), daemon=True)
        writer.start()
    timer = None
    if timeout:
        import threading
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
    got = _Replies(on_event, on_data)
    left = False
    try:
        for line in proc.stdout:
            got.take(line)
            if got.pending:
                got.pass_bytes(proc.stdout)
    except KeyboardInterrupt:
        if not outlive:
            proc.kill()
            raise
        left = True  # the far side goes on (a stop's KILL after the grace): left to it
        proc.leave()
        raise
    except BaseException:  # a caller's handler failing (its reader gone: `logs -f | head`)
        proc.kill()
        raise
    finally:
        rc = None if left else proc.wait()
        if timer:
            timer.cancel()
        stderr = b"" if left else proc.stderr_bytes()
    if writer is not None:
        writer.join(timeout=5)
    return rc, got.garbage, got.reply, stderr.decode("utf-8", "replace")


class _Replies:
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


def _agent_missing(reply: dict | None) -> bool:
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
    and SIGXFSZ are back to their defaults there (Python ignores SIGPIPE in itself)."""

    def __init__(self, argv: list[str]):
        from _signal import SIGPIPE, SIGXFSZ
        from _thread import allocate_lock
        self._lock = allocate_lock()
        self.returncode: int | None = None
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
            self.pid = os.posix_spawnp(argv[0], argv, child_environ(), file_actions=actions,
                                       setsigdef=(SIGPIPE, SIGXFSZ))
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
        # under the lock, and only before wait() has reaped the child: its pid cannot have
        # been given to another process yet
        with self._lock:
            if self.returncode is None:
                try:
                    os.kill(self.pid, 9)
                except ProcessLookupError:
                    pass

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


def _parse_line(line: bytes) -> dict | None:
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) and ("event" in msg or ("ok" in msg and "v" in msg)) else None


# ---------------------------------------------------------------------------------------
# Diagnosis: every way a call can end without the agent's reply gets its own message.
# ---------------------------------------------------------------------------------------

_SSH_FAILURES = [
    # OpenSSH's mux client when the master ends before the session opened, then its own
    # direct connect (capped to a keepalive interval, targets/ssh.py) got no answer either
    (r"read from master failed(?s:.*)(?:timed out|No route to host|Network is unreachable)",
     "the ssh link stopped answering: the control connection ended under the call (its keepalive "
     "went unanswered) and a new connection got no answer: link down or host frozen",
     "check the network to the host; the next call tries a full connect again "
     "(RUNWARD_SSH_ALIVE_TIMEOUT / [ssh] alive_timeout set the wait)"),
    (r"Could not resolve hostname", "host name could not be resolved",
     "check the host name, or add it to ~/.ssh/config"),
    (r"Connection refused", "connection refused: nothing listens for ssh there",
     "check the port and that sshd runs on the host"),
    (r"Connection timed out|Operation timed out|timed out during banner exchange|Connection timed out during",
     "connect timeout: the host did not answer",
     "check the address, a VPN or firewall; raise RUNWARD_CONNECT_TIMEOUT for slow links"),
    (r"No route to host|Network is unreachable", "no route to the host", "check the address and the network"),
    (r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|No \S+ host key is known",
     "host key verification failed", "verify the host's key and add it to known_hosts (ssh once by hand)"),
    (r"Permission denied", "authentication refused (Permission denied)",
     "check the user, the key (ssh-add -l) and authorized_keys on the host"),
    (r"Connection closed by|Connection reset|kex_exchange_identification|Broken pipe",
     "the connection was closed by the remote side", "check sshd's logs on the host; retry"),
]

_CONTAINER_ABSENT = (
    r"(?i)No such container|no such container|does not exist|Configuration file '.*' does not exist|"
    r"unknown container|not found: container")
_CONTAINER_STOPPED = (
    r"(?i)is not running|not running|container state improper|Failed to get init pid|"
    r"cannot exec in a stopped|is paused")
_PYTHON_MISSING = (
    r"(?i)python3?: (command )?not found|python3?: No such file|executable file [`'\"]?python3?[`'\"]? not found|"
    r"exec: \"?python3\"?: executable file not found|Failed to exec \"?python3|"
    r"No such file or directory.*python3|python3.*No such file or directory")


def diagnose(target: Target, raw: RawResult) -> RunwardError:
    rc, err = raw.returncode, raw.stderr.strip()
    last = "\n".join(err.splitlines()[-5:])
    details = {"exit_status": rc, "stderr_tail": last, "argv0": raw.argv[0]}
    ssh_hop = next((h for h in target.hops if h.kind == "ssh"), None)
    killed = re.search(_KILLED_PAT, err)
    if (killed or rc < 0 or 128 < rc < 192) and (stopped := _container_stopped(target)):
        return stopped  # a container stopped under the call kills what runs in it: say that
    if killed:
        where = str(target.hops[-1])
        name = _signame(int(killed.group(1)))
        return HopFailed(f"{where}: the agent was killed by {name} before it answered",
                         "something on the target killed it: the OOM killer (check dmesg), a `pkill -f` "
                         "whose pattern matched it, or a container/session timeout", hop=where, details=details)
    if ssh_hop is not None and rc == 255:
        for pat, what, hint in _SSH_FAILURES:
            if re.search(pat, err):
                return Unreachable(f"{ssh_hop}: {what}", hint, hop=str(ssh_hop), details=details)
    containers = [h for h in target.hops if h.kind != "ssh"]
    if containers and rc != 0:
        hop = containers[0]
        if re.search(_CONTAINER_ABSENT, err) and not re.search(_PYTHON_MISSING, err):
            return HopFailed(f"{hop}: container not found", _container_hint(hop, "absent"), hop=str(hop),
                             details=details)
        if re.search(_CONTAINER_STOPPED, err):
            return HopFailed(f"{hop}: container is not running", _container_hint(hop, "stopped"), hop=str(hop),
                             details=details)
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", err)
    if missing and rc == 1:
        # the bootstrap's own imports (the agent answers this itself once it runs): the
        # target's state, said once, with no traceback
        where = str(target.hops[-1]) if target.hops else "local"
        return HopFailed(f"{where}: python3 on the target lacks the standard module {missing.group(1)!r}",
                         "install the whole standard library there: apt-get install -y python3 "
                         "(Debian/Ubuntu; other systems: their python3 package)", hop=where,
                         details={"exit_status": rc, "module": missing.group(1), "argv0": raw.argv[0]})
    if rc in (126, 127) or re.search(_PYTHON_MISSING, err):
        hop = target.hops[-1] if target.hops else None
        where = str(hop) if hop else "local"
        if re.search(_PYTHON_MISSING, err) or rc == 127:
            return HopFailed(f"{where}: python3 not found on the target", 
                             "install python3 (>= 3.8) where the job runs: e.g. apt-get install -y python3-minimal",
                             hop=where, details=details)
    if ssh_hop is not None and rc == 255:
        # no known ssh message and no container message: the channel itself ended badly
        if not raw.stdout_lines and not last:
            return HopFailed(f"{ssh_hop}: ssh ended with 255 and no message: the connection dropped, or the "
                             "remote side was killed by a signal", "retry; check the host's sshd log and dmesg",
                             hop=str(ssh_hop), details=details)
        if not raw.stdout_lines:
            return Unreachable(f"{ssh_hop}: ssh failed (exit 255): {last or 'no message'}",
                               "run `runward doctor --on ...` or ssh -v by hand", hop=str(ssh_hop),
                               details=details)
    if rc < 0 or 128 < rc < 192:
        signum = -rc if rc < 0 else rc - 128
        name = _signame(signum)
        who = ("the agent" if target.is_local else "the local ssh/hop process") if rc < 0 else "the far side"
        return HopFailed(f"{who} was killed by {name} before the agent answered (exit {rc})",
                         "something on the target killed the agent (OOM killer? a pkill -f matching it?); "
                         "check dmesg on the target", hop=str(target.hops[-1]) if target.hops else "local",
                         details=details)
    if raw.stdout_lines:
        first = b"".join(raw.stdout_lines)[:200]
        return AgentError(f"the reply was not the agent's JSON; it began with {first!r}",
                          "a login script on the target prints to stdout (e.g. an echo in .bashrc); "
                          "make it quiet for non-interactive shells", hop=str(target.hops[-1]) if target.hops else "local",
                          details=details)
    # the message has stderr's last line; details (shown below it) the last five
    return AgentError(f"the agent gave no reply (exit status {rc}){': ' + last.splitlines()[-1] if last else ''}",
                      "run `runward doctor` on this target", hop=str(target.hops[-1]) if target.hops else "local",
                      details=details)


def _container_stopped(target: Target) -> RunwardError | None:
    """After a call through a container was killed by a signal: is the container itself
    still there and running? One `true` through the same hops (only on this failure path);
    the container's stop is the cause then, not the OOM killer or a pkill."""
    if not any(h.kind != "ssh" for h in target.hops):
        return None
    try:
        probe = _exchange(target.wrap(["true"], ssh_base()), b"", None, None, 20)
    except (RunwardError, OSError):
        return None
    rc, err = probe[0], probe[3]
    if rc == 0:
        return None
    hop = next(h for h in target.hops if h.kind != "ssh")
    if re.search(_CONTAINER_ABSENT, err) and not re.search(_PYTHON_MISSING, err):
        return HopFailed(f"{hop}: the container was removed while the call ran (what ran in it was killed with it)",
                         _container_hint(hop, "absent"), hop=str(hop), details={"stderr_tail": err[-500:]})
    if re.search(_CONTAINER_STOPPED, err):
        return HopFailed(f"{hop}: the container stopped while the call ran (what ran in it was killed with it)",
                         _container_hint(hop, "stopped"), hop=str(hop), details={"stderr_tail": err[-500:]})
    return None


def _container_hint(hop: Hop, what: str) -> str:
    cmds = {"docker": f"docker ps -a | grep {hop.name}; docker start {hop.name}",
            "podman": f"podman ps -a | grep {hop.name}; podman start {hop.name}",
            "lxc": f"lxc-info -n {hop.name}; lxc-start -n {hop.name}",
            "pct": f"pct status {hop.name}; pct start {hop.name}"}
    return ("check the container name/id and that it is running: " if what == "absent"
            else "start it first: ") + cmds.get(hop.kind, "")


def _signame(num: int) -> str:
    import signal
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
