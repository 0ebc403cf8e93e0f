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
import sys
import time
from collections.abc import Callable, Iterable

from ..agent.core import boot as _boot
from ..errors import UTF8_HINT, BadInput, from_agent, is_text, shown_bytes
from ..cache import cache_path, read_cache, write_cache
from ..targets import Target

# Split by concern (each module's docstring says its own); the names callers and tests use
# are still importable from here, so they need not know where each went.
from .diagnosis import HopWatch, RawResult, diagnose
from .exchange import HEARTBEAT_S, agent_missing, run_call  # noqa: F401
from ..targets.spawn import Spawned  # noqa: F401  (for callers)
from .residentroute import (RESIDENT_OPS, Resident, far_key, far_lines, far_remember,  # noqa: F401
                            resident_on, single_ssh)
from ..targets.sshconf import HIDDEN_ENV, alive_timeout, child_environ, control_dir, ssh_alive_options, ssh_base  # noqa: F401

_AGENT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agent")
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


# On a remote target the agent runs under a small sh that names the signal if the agent is
# killed: OpenSSH turns a remote death by signal into a bare exit 255 with no message, the
# same as a dropped connection, and "no output" must never be the answer.
_REPORT_SIGNAL = ('"$@"; s=$?; if [ $s -gt 128 ] && [ $s -lt 192 ]; then '
                  'echo "runward: the agent was killed by signal $((s-128))" >&2; fi; exit $s')


def agent_argv(target: Target) -> list[str]:
    # -S: the agent is stdlib only; skipping site saves a good part of its start-up
    if target.is_local:
        return [sys.executable, "-S", "-c", _boot.BOOTSTRAP]
    py = target.python or os.environ.get("RUNWARD_PYTHON") or "python3"
    inner = ["/bin/sh", "-c", _REPORT_SIGNAL, "runward-agent", py, "-S", "-c", _boot.BOOTSTRAP]
    return target.wrap(inner, ssh_base(), tagged=True)


# Operations that follow until their window ends, or for ever (logs with "follow"): their
# stdin is held open until the reply, and the agent ends them when it closes (the CLI
# interrupted or killed, its ssh or podman killed, the link dropped: every hop passes the EOF
# on). A follower left running in a container is a process runward leaked.
_FOLLOWS = frozenset(("watch",))
# Ops whose far side goes on to its end without us (the agent's wire.outlive_caller): on
# Ctrl-C the call's child is neither killed nor waited for. A local stop's child is the agent
# itself, and a stop (or a kill --yes) interrupted after its TERM still owes the KILL after the grace.
_OUTLIVE = frozenset(("stop", "kill"))
def _launched(ev: dict) -> bool:
    """A start's far side says the job is launched (an interrupted start waits for it: exchange)."""
    return isinstance(ev, dict) and "started" in ev


LAST_ROUTE = ""  # how the last call reached its agent: "resident" or "exec" (for tests)
LAST_WAY = ""  # and the resident, where it did: "relay" or "forward" (for tests)


def _refuse_undecodable(value, where: str = "") -> None:
    """A request holding a string that is not UTF-8 text (a byte of argv or the environment that
    did not decode: a lone surrogate) is bad input, refused before anything is sent: the agent
    would fail writing it into its records (a traceback, exit 3). The verbs name their own
    arguments first (inputs.refuse_undecodable); this names the request's field."""
    if isinstance(value, str):
        if not is_text(value):
            raise BadInput(f"{where.lstrip('.') or 'a value'} '{shown_bytes(value)}' is not UTF-8 text", UTF8_HINT)
    elif isinstance(value, dict):
        for k, v in value.items():
            _refuse_undecodable(k, f"{where} (a name)")
            _refuse_undecodable(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _refuse_undecodable(v, f"{where}[{i}]")


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
    way to it (Resident); where that gives no reply it is made the ordinary way.

    on_data takes the binary an op sends back (pull): after an event line {"data": N}, the
    next N bytes of stdout, handed on in pieces of at most 1 MiB as they arrive. A handler
    (on_event, on_data) that raises ends the far side at once.

    late(request) completes the request in place just before it is sent: the far side's
    agent starts meanwhile (its ssh session, its Python, the agent from its cache), for a
    request that waits on something else (a multi-node start on its probe of every node).
    If late raises, the far side is sent no request (it runs nothing) and the error is
    raised here."""
    global LAST_ROUTE, LAST_WAY
    _refuse_undecodable(request)
    req = dict(request)
    req.setdefault("v", _boot.PROTOCOL)
    if target.engine is not None:  # what its scheme read (a partition, its options) goes with every request
        req = target.engine.request(target, req)
    if target.home and "home" not in req:
        req["home"] = target.home
    from . import inprocess
    if inprocess.wanted(target, req, payload, late, timeout):  # the CLI's local status: no second Python
        reply = inprocess.call(req, on_event)
        if reply is not None:
            LAST_ROUTE = "in-process"
            if reply.get("ok"):
                return reply["result"]
            raise from_agent(reply.get("error") or {}, hop="local")
    sha = agent_sha()
    known = far_lines()
    far = far_key(target)
    entry = f"{sha} {far}" if far is not None else None  # None: nothing kept is used, nor kept
    resident = Resident(target, req, payload, entry, known)
    if resident.forward:
        reply = resident.call(sha, json.dumps(req).encode() + b"\n", on_event, timeout)
        if reply is not None:
            LAST_ROUTE, LAST_WAY = "resident", resident.way
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
        # a dropped link closes nothing on the far side: the follower ends once the
        # heartbeat run_call sends on stdin has been silent for the alive timeout
        req["heartbeat"] = {"every": HEARTBEAT_S, "silent": max(3.0, alive_timeout())}
    body = None if late is not None else json.dumps(req).encode() + b"\n"

    def completed() -> bytes:
        nonlocal body
        if body is None:
            late(req)
            body = json.dumps(req).encode() + b"\n"
        return body
    # a payload is a stream that cannot be sent twice: it never risks the retry
    send_src = payload is not None or entry is None or entry not in known
    while True:
        agent = agent_source()[0] if send_src else b""
        head = b"%d %s\n" % (len(agent), sha.encode()) + agent
        t0 = time.monotonic()
        watch = HopWatch.of(target)
        rc, garbage, reply, stderr = run_call(argv, head + (body or b""), payload, on_event, timeout, on_data,
                                               held, completed if body is None else None, req["op"] in _OUTLIVE,
                                               _launched if req["op"] == "start" else None, watch)
        if not send_src and agent_missing(reply):
            send_src = True
            continue
        break
    raw = RawResult(argv, rc, garbage, stderr, time.monotonic() - t0)
    if reply is not None:
        if send_src and entry is not None and entry not in known and not reply.get("uncached"):
            far_remember(entry, sha, known)
        if resident.wanted and isinstance(reply.get("resident"), dict):
            resident.found(reply["resident"])
        if reply.get("ok"):
            return reply["result"]
        raise from_agent(reply.get("error") or {}, hop=str(target.hops[-1]) if target.hops else "local")
    if watch is not None and watch.wedged is not None:
        raise watch.error()
    raise diagnose(target, raw)


def resident_route(target: Target) -> str | None:
    """How this CLI reaches the target's resident agent (for doctor): "forward" (a forward
    of the control master is recorded), "not yet" (the next read-only call starts or finds
    it), "relay" (and a relay keeps a connection through it), "given up" (two failed tries in a row with this agent version), "off"
    (RUNWARD_RESIDENT=0); None where there is none (not a single ssh hop)."""
    if not single_ssh(target):
        return None
    if not resident_on():
        return "off"
    far = far_key(target)
    r = Resident(target, {"op": "status"}, None, f"{agent_sha()} {far}" if far is not None else None, far_lines())
    if r.forward:
        return "relay" if r.relay_listens() else "forward"
    return "given up" if not r.wanted else "not yet"


# ---------------------------------------------------------------------------------------
# Diagnosis: every way a call can end without the agent's reply gets its own message.
# ---------------------------------------------------------------------------------------


