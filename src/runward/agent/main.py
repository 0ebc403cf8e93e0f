"""The agent's entry: one request from stdin, events and one reply on stdout; or, by its
argv word, the shim or the resident. The op table names each op's module and function; a
module is imported only when its op is asked for, so a status never imports the log parser,
re or json."""

import os
import sys
import time

from .core import boot, launchers
from .core.store import DISK_FULL, Home, disk_full
from .core.wire import AgentFailure, bad_input, json_loads, reply, send_bytes, set_caller, set_events

PLAIN, STREAM, IO = "plain", "stream", "io"  # fn(req, home), fn(req, home, emit), fn(req, home, emit, stdin)
OUT = "out"  # fn(req, home, emit, send): send(bytes) writes binary after its event (wire.send_bytes)
OPS = {
    "start": ("ops.start", "start", PLAIN),
    "stop": ("ops.stop", "stop", PLAIN),
    "checkpoint": ("ops.stop", "checkpoint", PLAIN),  # a multi-node stop's first half (every node)
    "status": ("ops.status", "status", PLAIN),
    "spec": ("ops.status", "spec", PLAIN),
    "ping": ("ops.status", "ping", PLAIN),
    "logs": ("ops.status", "logs", STREAM),
    "exec": ("ops.execute", "execute", PLAIN),
    "push": ("ops.sync", "push", IO),
    "manifest": ("ops.sync", "manifest", PLAIN),
    "hash": ("ops.files", "hashes", PLAIN),
    "pull": ("ops.files", "pull", OUT),
    "rm": ("ops.records", "rm", PLAIN),
    "prune": ("ops.records", "prune", PLAIN),
    "ps": ("ops.pskill", "ps", PLAIN),
    "kill": ("ops.pskill", "kill", PLAIN),
    "gpus": ("ops.gpus", "gpus", PLAIN),
    "nspid": ("ops.gpus", "nspid", PLAIN),
    "health": ("ops.health", "health", PLAIN),
    "watch": ("ops.health", "watch", STREAM),
    "doctor": ("ops.doctor", "doctor", PLAIN),
    "stacks": ("ops.stacks", "stacks", PLAIN),
    "free_ports": ("ops.nodes", "free_ports", PLAIN),
    "node_check": ("ops.nodes", "node_check", PLAIN),  # an engine job's processes on a node not its head
    "history": ("ops.history", "history", PLAIN),
    "compare": ("ops.compare", "compare", PLAIN),
    "overlay": ("ops.overlay", "overlay", PLAIN),  # plot --attempts
}
CACHE_KEEP_S = 7 * 86400


def handler(op):
    """(function, kind) serving op, its module imported now (relative to this package)."""
    if op not in OPS:
        raise bad_input("unknown operation %r" % (op,))
    module, name, kind = OPS[op]
    return getattr(__import__(module, globals(), None, [name], 1), name), kind


def _request(line, stdout, extra):
    """The request dict, or None after replying why there is none."""
    try:
        req = json_loads(line.decode())
    except ValueError:
        reply(stdout, {"v": boot.PROTOCOL, "ok": False, "error": {
            "type": "AgentError", "message": "request is not valid JSON: %r" % line[:80]}}, extra)
        return None
    if not isinstance(req, dict) or req.get("v") != boot.PROTOCOL:
        reply(stdout, {"v": boot.PROTOCOL, "ok": False, "error": {
            "type": "AgentError", "message": "protocol version mismatch: agent speaks %d, request %r" % (
                boot.PROTOCOL, req.get("v") if isinstance(req, dict) else None)}}, extra)
        return None
    return req


# The ops that never touch the home: they run where a root caller has another user's HOME.
HOMELESS = frozenset(("ping", "exec", "ps", "kill", "gpus", "nspid", "doctor", "free_ports", "node_check"))


def _run(req, home, stdin, stdout, extra):
    if req.get("op") not in HOMELESS:
        home.check_ours(root_only=True)
    if req.get("resident") is not None:
        from .core import resident
        if resident.wanted(req):
            where = resident.ensure(req, home)
            if where is not None:
                extra["resident"] = where  # where this call found or started the resident
    op = req.get("op")
    fn, kind = handler(op)
    if op in ("start", "stop"):  # an engine's attempt: its launcher starts and stops it
        name = launchers.of_request(req, home)
        if name is not None:
            from .ops import launcher_ops
            fn = getattr(launcher_ops(name), op)
    if kind == PLAIN:
        return fn(req, home)
    emit = lambda ev: reply(stdout, {"event": ev})  # noqa: E731
    if kind == OUT:
        return fn(req, home, emit, lambda data: send_bytes(stdout, data))
    return fn(req, home, emit) if kind == STREAM else fn(req, home, emit, stdin)


def _silent_s(req):
    """The silence after which a heartbeating caller counts as gone (wire.set_caller)."""
    beat = req.get("heartbeat")
    try:
        return max(1.0, float(beat["silent"])) if isinstance(beat, dict) else None
    except (KeyError, TypeError, ValueError):
        return None


def serve(stdin, stdout, only=None):
    """One request from stdin, answered on stdout. only: the ops this agent takes (the
    resident's read-only verbs), None for all."""
    extra = {}  # added to the reply
    if boot.SHIPPED.get("cached") == 0:
        # the bootstrap could not cache the agent here (a read-only home): the caller must
        # keep sending the blob instead of its hash alone
        extra["uncached"] = True
    req = _request(stdin.readline(), stdout, extra)
    if req is None:
        return 2
    set_events(lambda ev: reply(stdout, {"event": ev}))
    try:
        # a follower ends when its caller is gone (wire.caller_gone)
        set_caller(stdin.fileno() if req.get("stdin_held") else None, stdout.fileno(), _silent_s(req))
    except (AttributeError, OSError, ValueError):
        set_caller(None, None)  # not a file (a test's buffer): followers follow their window
    if only is not None and not (isinstance(req.get("op"), str) and req["op"] in only):
        # the resident is a standing door into this account, open to whatever reaches its
        # socket: only what reads comes through it; a change runs in an agent its caller
        # started for it (and whose end that caller sees and diagnoses)
        reply(stdout, {"v": boot.PROTOCOL, "ok": False, "error": {
            "type": "BadInput", "message": "the resident agent serves only read-only verbs; %s goes through "
            "a fresh agent" % (req.get("op"),)}}, extra)
        return 2
    try:
        try:
            result = _run(req, Home(req.get("home")), stdin, stdout, extra)
        except OSError as e:
            if e.errno in DISK_FULL:
                # a full disk is the target's state, not a bug: said as such, whatever wrote
                raise disk_full(e.filename or "a file")
            raise
        reply(stdout, {"v": boot.PROTOCOL, "ok": True, "result": result}, extra)
        return 0
    except AgentFailure as e:
        reply(stdout, {"v": boot.PROTOCOL, "ok": False, "error": e.to_dict()}, extra)
        return 1
    except ImportError as e:  # of our own package: a bug; else a module this python lacks
        if not e.name or e.name.split(".")[0] == "runward_agent" or _ours(e.name):
            return _bug(stdout, e, extra)
        reply(stdout, {"v": boot.PROTOCOL, "ok": False, "error": missing_module(e.name).to_dict()}, extra)
        return 1
    except BrokenPipeError:
        return 1
    except Exception as e:  # a bug: send it home with its traceback (rebuilt locally)
        return _bug(stdout, e, extra)


def _ours(name):
    """Whether module NAME is of this package: runward_agent as shipped, runward.agent in the
    source tree (the CLI's in-process status, transport/inprocess.py), where a missing one is a bug too."""
    pkg = __name__.rpartition(".")[0]
    return bool(pkg) and (name == pkg or name.startswith(pkg + "."))


def _bug(stdout, e, extra):
    import traceback
    reply(stdout, {"v": boot.PROTOCOL, "ok": False, "error": {
        "type": "AgentError", "message": "%s: %s" % (type(e).__name__, e),
        "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__))}}, extra)
    return 1


def missing_module(name):
    """A standard module this python lacks: the target's state, said as such, not a bug's
    traceback (Debian's python3-minimal has no json, shutil, email, ...)."""
    return AgentFailure(
        "HopFailed", "python3 on the target (%s %s) lacks the standard module %r" % (
            sys.executable, sys.version.split()[0], name),
        "install the whole standard library there: apt-get install -y python3 (Debian/Ubuntu; "
        "other systems: their python3 package)", module=name)


def prune_cache():
    """The code cache keeps one compiled agent per version (~250 KB), and each version's
    resident leaves a lock and a log: when this version has just been compiled here (its
    cache file is under a minute old; a cache hit never gets here with a fresh file), the
    other versions' files older than a week go. Called after the reply; rare by nature."""
    sha = boot.SHIPPED.get("sha")
    if not sha or not boot.SHIPPED.get("source") or boot.SHIPPED.get("cached") != 1:
        return
    d = os.path.join(Home().path, "cache")  # the bootstrap's: by RUNWARD_HOME, not the request
    own = ("agent-%s." % sha[:32], "resident-%s." % sha[:16])
    try:
        names = os.listdir(d)
        mine = [n for n in names if n.startswith(own[0])]
        now = time.time()
        if not mine or now - os.stat(os.path.join(d, mine[0])).st_mtime > 60:
            return
        for n in names:
            if n.startswith(("agent-", "resident-")) and not n.startswith(own):
                p = os.path.join(d, n)
                if now - os.lstat(p).st_mtime > CACHE_KEEP_S:
                    os.unlink(p)
    except OSError:
        pass


def preload(ops):
    """Import the modules of OPS and the log parser (whose regexes compile at import): the
    resident does this once, before it forks a child per connection."""
    for op in ops:
        try:
            handler(op)
        except Exception:
            pass  # an op this agent cannot serve here answers for itself, in its child
    from . import logmetrics  # noqa: F401  (status reads the run's health)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == boot.SHIM_ARG:
        from .supervise import shim
        params = json_loads(sys.stdin.buffer.readline().decode())
        try:
            shim.main(params["home"], params["name"], params["attempt"], params["env"], params.get("notify"))
        except Exception as e:
            shim.failed(params["home"], params["name"], e)  # said as a failure, never as "killed"
            raise
        shim.end()
        return 0
    if len(sys.argv) >= 2 and sys.argv[1] == boot.RESIDENT_ARG:
        from .core import resident
        return resident.main(json_loads(sys.stdin.buffer.readline().decode()), serve, preload)
    rc = serve(sys.stdin.buffer, sys.stdout.buffer)
    prune_cache()
    return leave(rc)


def leave(rc):
    """Exit with rc now, without the interpreter's teardown (it frees every module's objects
    one by one: ~1 ms of a status call's agent), where nothing is left for it to do: the reply
    is written and flushed, and no other thread runs. Else rc, for the ordinary exit."""
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return rc
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        return rc  # the interpreter says it as it always does
    os._exit(rc)
