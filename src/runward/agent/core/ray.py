"""Ray's Jobs REST API on the head (the dashboard), and what /proc says of a Ray job's
processes here: submit, ask a job's state, stop, and the attempt's marked processes.

Each API call has a timeout; a dashboard that does not answer is Unreachable (exit 3) naming
it, one that answers with a server error HopFailed (exit 3), any other error Failed, each with
its words (docs/ray.md). urllib is imported inside the calls: health, prune and history
import this module on every call (launchers.py)."""

import json
import time

from . import rayreaper
from .procfs import CLK_TCK, HOME_MARKER, MARKER, boot_time, descendants, protected, scan
from .wire import AgentFailure, bad_input

API_TIMEOUT = 10.0
# the attempt entry's keys the target gave it (its engine_spec): restart compares them with the target's now
TARGET_KEYS = ("dashboard", "resources")
# Ray's JobStatus -> runward's states. A job that ended by a stop (Ray's or runward's) is
# "stopped"; FAILED with a driver exit code is the program's own end.
STATES = {"PENDING": "pending", "RUNNING": "running", "SUCCEEDED": "exited", "FAILED": "exited",
          "STOPPED": "stopped"}
ACTIVE = frozenset(("PENDING", "RUNNING"))


def state_of(ex):
    """runward's state of an ended attempt: "stopped" when runward's stop ended it, whatever
    Ray's word (its driver ended by runward's signal is FAILED or SUCCEEDED in Ray's record)."""
    return "stopped" if ex.get("stopped_by") == "runward" else STATES.get(ex.get("state"), "lost")
# Ray's JobSupervisor actor's worker: the parent of the entrypoint's shell, the job's driver
RAY_WORKER = b"ray::"


def call(dashboard, method, path, body=None, timeout=API_TIMEOUT):
    """(HTTP status, body text) of one Jobs API call; an unreachable dashboard raises."""
    import urllib.error
    import urllib.request
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(dashboard + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (OSError, ValueError) as e:  # URLError, a refused or timed-out connection, a reset
        reason = getattr(e, "reason", None) or e
        raise AgentFailure("Unreachable", "the Ray dashboard at %s did not answer (%s %s): %s" % (
            dashboard, method, path, reason), "is the Ray head up (`ray status` on the head)? the target's "
            "dashboard option in runward.toml names the Jobs API's address as seen from the head")


def _error(dashboard, method, path, status, text):
    """An error answer as the reply's failure: Failed with Ray's words; a server error (5xx)
    HopFailed (exit 3): the dashboard answers, its Jobs API does not work."""
    said = "the Ray dashboard at %s answered %s %s with HTTP %d: %s" % (dashboard, method, path, status, text.strip()[:300])
    if status >= 500:
        return AgentFailure("HopFailed", said, "the dashboard is up but its Jobs API failed: see the dashboard's log "
                            "on the head (session_latest/logs/dashboard.log) and `ray status` there")
    return AgentFailure("Failed", said, "see the dashboard's log on the head (session_latest/logs/dashboard.log)")


def _json(dashboard, method, path, body=None):
    """The JSON answer of a call that must succeed; an error answer raises (_error)."""
    status, text = call(dashboard, method, path, body)
    if status >= 400:
        raise _error(dashboard, method, path, status, text)
    try:
        return json.loads(text)
    except ValueError:
        raise AgentFailure("Failed", "the Ray dashboard at %s answered %s %s with no JSON: %r" % (
            dashboard, method, path, text[:200]))


def check_api(dashboard):
    """Ray's version where the Jobs API answers; a Ray without it is bad input."""
    status, text = call(dashboard, "GET", "/api/version")
    if status == 404:
        raise bad_input("the server at %s has no Jobs API (GET /api/version: 404)" % dashboard,
                        "runward needs Ray >= 2.0 with the dashboard (pip install 'ray[default]')")
    if status >= 400:
        raise _error(dashboard, "GET", "/api/version", status, text)
    try:
        return json.loads(text).get("ray_version")
    except (ValueError, AttributeError):
        raise bad_input("the server at %s is not a Ray dashboard: %r" % (dashboard, text[:120]),
                        "the target's dashboard option names the Jobs API's address")


def submit(dashboard, body):
    """POST /api/jobs/: the submission id; Ray's refusal of the job (4xx) is bad input with
    its words, a 404 a server with no Jobs API there, a server error HopFailed (_error)."""
    status, text = call(dashboard, "POST", "/api/jobs/", body)
    if status == 404:
        raise bad_input("the server at %s has no Jobs API (POST /api/jobs/: 404): %s" % (dashboard, text.strip()[:200]),
                        "the target's dashboard option names the Ray dashboard's address as seen from the head "
                        "(e.g. dashboard = \"http://127.0.0.1:8265\")")
    if status >= 500:  # not asked again: a second POST could submit the job twice
        raise _error(dashboard, "POST", "/api/jobs/", status, text)
    if status >= 400:
        raise bad_input("Ray at %s refused the job: HTTP %d: %s" % (dashboard, status, text.strip()[:400]),
                        "fix the target's resources option or the command")
    return json.loads(text)["submission_id"]


def job(dashboard, sid):
    """GET /api/jobs/ID: Ray's record of the job, or None where Ray does not know it (the job
    list lives in the head's memory: a head restarted since has forgotten it)."""
    status, text = call(dashboard, "GET", "/api/jobs/" + sid)
    if status == 404:
        return None
    if status >= 400:
        raise _error(dashboard, "GET", "/api/jobs/" + sid, status, text)
    return json.loads(text)


def stop(dashboard, sid):
    """POST /api/jobs/ID/stop: whether Ray had a job to stop."""
    status, text = call(dashboard, "POST", "/api/jobs/%s/stop" % sid)
    if status == 404:
        return False
    if status >= 400:
        raise _error(dashboard, "POST", "/api/jobs/%s/stop" % sid, status, text)
    return bool(json.loads(text).get("stopped"))


# Ends a job Ray keeps PENDING (its stop leaves such a job waiting): its JobSupervisor actor
# killed, which Ray then records FAILED. A Ray client call, which the stdlib agent cannot make:
# it runs with the Python of the head's own dashboard, whose Ray it is.
KILL_SUPERVISOR = ("import sys, ray\n"
                   "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
                   "ray.kill(ray.get_actor('_ray_internal_job_actor_' + sys.argv[2], "
                   "namespace='SUPERVISOR_ACTOR_RAY_NAMESPACE'))\n")


def end_pending(dashboard, sid, timeout=60.0):
    """Kill the JobSupervisor actor of the PENDING job SID: None when done, else why not (no
    dashboard process of this port here to borrow Ray's Python and GCS address from, or the
    call's own error)."""
    import subprocess
    port = "--port=" + dashboard.rstrip("/").rsplit(":", 1)[-1]
    for p in scan().values():
        argv = p.cmdline()
        if not p.dead and any(a.endswith("ray/dashboard/dashboard.py") for a in argv[:2]) and port in argv:
            gcs = next((a.split("=", 1)[1] for a in argv if a.startswith("--gcs-address=")), None)
            try:
                # its argv[0], not /proc's exe: a virtualenv's python is a link to the base one,
                # which has not the virtualenv's Ray
                exe = argv[0] if argv[0].startswith("/") else __import__("os").readlink("/proc/%d/exe" % p.pid)
                r = subprocess.run([exe, "-c", KILL_SUPERVISOR, gcs or "auto", sid], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, timeout=timeout, env=dict(
                                       __import__("os").environ, RAY_USAGE_STATS_ENABLED="0"))
            except (OSError, subprocess.TimeoutExpired) as e:
                return "killing its JobSupervisor actor failed: %s" % e
            return None if r.returncode == 0 else "killing its JobSupervisor actor failed: %s" % (
                r.stderr.decode("utf-8", "replace").strip().splitlines() or ["exit %d" % r.returncode])[-1]
    return "no Ray dashboard process (%s) on this host to make the Ray call with" % port


def exit_fact(info):
    """Ray's end of a job as runward's exit fact: its state, driver_exit_code, message."""
    # the end as Ray dated it (ms since the epoch), not when runward first looked
    end = info.get("end_time")
    ex = {"state": info["status"], "at": end / 1000.0 if isinstance(end, (int, float)) and end else time.time(),
          "source": "ray"}
    if isinstance(info.get("start_time"), (int, float)) and info["start_time"]:
        ex["ray_started_at"] = info["start_time"] / 1000.0
    code = info.get("driver_exit_code")
    if isinstance(code, int):
        ex["exit_code"] = code
        if code > 128 or code < 0:  # the shell's 128+N, or a negative signal number
            ex["signal"] = _signame(code - 128 if code > 128 else -code)
        else:
            ex["code"] = code
    else:  # the alerts say what is known of the end, not that nobody saw it
        ex["note"] = "Ray says %s, with no driver exit code" % info["status"]
    if info.get("message"):
        ex["message"] = info["message"][:300]
    # a FAILED with no driver exit code is Ray's own failure (JOB_SUPERVISOR_ACTOR_DIED: the
    # driver's node died): its type and the node are kept, Ray's long message cut above may not
    if info.get("error_type"):
        ex["error_type"] = info["error_type"]
    if info.get("driver_node_id"):
        ex["node_id"] = info["driver_node_id"]
    return ex


def _signame(n):
    """The signal's name as every other target's exit says it (SIGTERM, not TERM)."""
    import signal
    try:
        return signal.Signals(n).name
    except ValueError:
        return "SIG%d" % n


def processes(att, procs=None):
    """This host's live processes of the attempt, pids sorted: those carrying its marker (the
    driver and its descendants: the entrypoint exports it, Ray's own JobSupervisor worker and
    the watchdog it starts beside the driver do not carry it; setsid and double-fork escapees
    too), every process of the driver's session (session()), and every descendant of those:
    the orphans the entry's subreaper adopted, env -i and setsid ones too (core/rayreaper.py)."""
    procs = procs if procs is not None else scan()
    prot = protected(procs)
    found = set(p.pid for p in procs.values() if not p.dead and p.pid not in prot
                and p.env(MARKER) == att.get("marker") and p.env(HOME_MARKER) in (None, att.get("home_id")))
    found |= set(session(att, procs, prot))
    found |= set(pid for pid in descendants(found, procs) if not procs[pid].dead and pid not in prot)
    return sorted(found)


def session(att, procs, prot=()):
    """The processes of the driver's session: Ray starts the entry as a session leader (the
    entry's pid, `session`, for an attempt whose driver is the job under the entry's
    subreaper; the driver's own for one whose entry exec'd the command), so a child that
    cleared its environment but kept the session is still the job's. A pid in use as a
    session id is not reused while the session lives; a leader alive with another start time
    is another session (the entry ended and its pid was reused), and a member started before
    the leader is not the job's."""
    drv = (att.get("ray") or {}).get("driver") or {}
    lead = drv.get("session") or drv
    sid, start = lead.get("pid"), lead.get("start")
    if not sid or start is None:
        return []
    leader = procs.get(sid)
    if leader is not None and not leader.dead and leader.start != start:
        return []
    return [p.pid for p in procs.values() if p.sid == sid and not p.dead and p.start >= start and p.pid not in prot]


# Ray's word on a worker's job, in its environment and its children's: a worker Ray starts
# for the job carries the job's id (hex, as Ray's job record gives it); one Ray started
# before the job and leased to it keeps ffffffff (measured, ray 2.60)
JOB_ID_VAR = "RAY_JOB_ID"
RAYLET_VAR = "RAY_RAYLET_PID"  # the raylet that started the worker: which node, which incarnation of it
OWNED_VARS = (JOB_ID_VAR, RAYLET_VAR)  # Ray's own, never the run's: a start that gives one is refused


def job_scope(att, info, spare=(), ours=(), names=()):
    """What ties a process here to the attempt's Ray job without the marker (job_id_processes):
    the job id of Ray's current record of the attempt's own submission, and the earliest start
    a process of the job has (the driver's, else Ray's start_time less 1 s for btime's
    rounding); None where Ray no longer knows the job. Ray's job ids restart with its head (the
    counter lives in the GCS's memory: 02000000 again after a restart), so an id kept from
    before could name a newer job's processes; one read now names this GCS's job, and a process
    started before the driver is an older job's. Its workers' raylet is one of this node's, as
    Ray lists them now (raylets_here): a process of a node at another address is out of this
    agent's sight even where it shares this /proc (the test cluster's), and a raylet since
    restarted is another GCS's. SPARE: the detached actors' pids here (NAMES theirs), OURS the
    job's other workers here (make_scope)."""
    drv = (att.get("ray") or {}).get("driver") or {}
    started = (info or {}).get("start_time")
    if not (info or {}).get("job_id"):
        return None
    if drv.get("start") is not None:
        since = drv["start"]
    elif isinstance(started, (int, float)) and started:
        since = int((started / 1000.0 - boot_time() - 1) * CLK_TCK)
    else:
        return None
    return make_scope(info["job_id"], since, raylets_here(att["ray"]["dashboard"], scan()), spare, ours, names)


def make_scope(job_id, since, raylets, spare=(), ours=(), names=()):
    """The bounds job_id_processes applies, the head's (job_scope) and another node's agent's
    (node_scope) alike: the job's id, its earliest start (ticks since this machine's boot),
    this node's raylets (pids as text), SPARE the detached actors' pids here, which Ray keeps
    after the job by design (they and their children spared), NAMES theirs, OURS the job's
    other workers here (a process of their tree is theirs)."""
    return {"job_id": job_id, "since": since, "raylets": set(raylets), "spare": set(spare), "ours": set(ours),
            "names": list(names), "found": set(), "held": {}}


def scope_epoch(scope):
    """The scope's earliest start as epoch seconds, for another machine's agent (its ticks
    since boot count from another boot)."""
    return scope["since"] / float(CLK_TCK) + boot_time()


def node_scope(job_id, since_epoch, node_ids, procs, spare=(), ours=(), names=()):
    """The scope on a node that is not the head's (agent/ops/raynode.py): its raylets are the
    processes started with the `--node_id=` of a node id the head gave; the job's start, epoch
    seconds, made this machine's ticks less 1 s for btime's rounding."""
    ids = {"--node_id=" + i for i in node_ids}
    raylets = {str(p.pid) for p in procs.values() if p.comm == "raylet" and not p.dead and ids & set(p.cmdline())}
    since = int((since_epoch - boot_time() - 1) * CLK_TCK)
    return make_scope(job_id, since, raylets, spare, ours, names)


def raylets_here(dashboard, procs):
    """The pids (as their workers' RAY_RAYLET_PID says them) of this node's live raylets: those
    started with the --node_id of a node Ray lists ALIVE at the head's address."""
    ns = nodes(dashboard)
    head_ip = next((n["ip"] for n in ns.values() if n["head"]), None)
    ids = {"--node_id=" + i for i, n in ns.items() if n["ip"] == head_ip and n["state"] == "ALIVE"}
    return {str(p.pid) for p in procs.values() if p.comm == "raylet" and not p.dead and ids & set(p.cmdline())}


def job_id_processes(scope, procs, prot=None):
    """The live processes here with the job's RAY_JOB_ID (SCOPE: make_scope) that no marker
    finds: what the job's Ray workers start, in any session (a worker is the raylet's child,
    not the driver's): started since the job's start, under one of this node's raylets,
    carrying no marker (one with the run's is processes()'s; another run's is that run's),
    not protected, not a detached actor's. Not a raylet's child: that is a Ray worker, ended by
    Ray's word on it (workers()), never by the id alone: an idle worker Ray starts for the job
    and loses mid-start holds the raylet's startup slots until its registration times out, and
    the next job waits PENDING. While a detached actor of the job lives here, a process the id
    alone ties to the job (out of the job's other workers' trees: an orphan) may be that
    actor's, which carries the same id: it is held, not returned, and named in SCOPE's "held"
    (held_row). Each one returned is remembered in SCOPE's "found"."""
    prot = protected(procs) if prot is None else prot
    spare = set(scope["spare"]) | descendants(scope["spare"], procs)
    out = [p.pid for p in procs.values() if not p.dead and p.start >= scope["since"] and p.pid not in spare
           and p.pid not in prot and p.env(JOB_ID_VAR) == scope["job_id"]
           and p.env(RAYLET_VAR) in scope["raylets"] and str(p.ppid) not in scope["raylets"]
           and p.env(MARKER) is None]
    if any(pid in procs and not procs[pid].dead for pid in scope["spare"]):
        tree = descendants(scope["ours"], procs)
        for pid in out:
            if pid not in tree:
                scope["held"].setdefault(pid, held_row(scope, procs[pid]))
        out = [pid for pid in out if pid in tree]
    scope["found"].update(out)
    return sorted(out)


def held_row(scope, p):
    """A process the stop leaves as maybe a detached actor's: pid, command, whose, how to end it."""
    names = ", ".join(scope["names"]) or "(no name)"
    cmd = p.cmdline_raw().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    return {"pid": p.pid, "start": p.start, "cmd": cmd,
            "ray_job_id": scope["job_id"], "detached_actors": list(scope["names"]),
            "why": "may be detached actor %s's: Ray keeps it by design" % names, "end_with": "kill %d" % p.pid}


def held_left(scope, procs):
    """The held processes still alive, pids sorted (the same process: its start time)."""
    return [r for pid, r in sorted(scope["held"].items())
            if pid in procs and not procs[pid].dead and procs[pid].start == r["start"]] if scope else []


def entry(att, procs):
    """The job's entry here: the marked process whose parent is Ray's JobSupervisor worker
    (the entrypoint's shell, exec'd into the entry), or None."""
    for pid in processes(att, procs):
        parent = procs.get(procs[pid].ppid)
        if parent is not None and parent.cmdline_raw().startswith(RAY_WORKER):
            return pid
    return None


def driver(att, procs):
    """The job's driver here (pid), or None: the job under the entry's subreaper
    (rayreaper.job_of), or the entry itself where it exec'd the command (a Python without
    ctypes, an attempt of an older runward)."""
    e = entry(att, procs)
    if e is None:
        return None
    if rayreaper.LOADER not in procs[e].cmdline()[:5]:
        return e
    return rayreaper.job_of(e, procs)


def adopt(store, att, info=None):
    """The driver of an attempt whose start never saw it (a start interrupted in its settle
    before Ray ran the job): found as start finds it (entry, driver), dated by Ray's start_time,
    and kept in the attempt, so that status, watch and stacks have its pid, its start and the
    run's clock. Kept once, under the run's lock (a start or stop that holds it records or ends
    the job itself: nothing is written then) and the record's lock; the first driver recorded
    stands. INFO: Ray's record of the job, where the caller has it. Returns the attempt."""
    if (att.get("ray") or {}).get("driver") or (att.get("exit") or {}).get("state"):
        return att
    procs = scan()
    d = driver(att, procs)
    if d is None:
        return att
    if info is None:
        try:
            info = job(att["ray"]["dashboard"], att["ray"]["submission_id"]) or {}
        except AgentFailure:  # the process is the fact; Ray's date and node are left out
            info = {}
    drv = {"pid": d, "start": procs[d].start, "node_id": info.get("driver_node_id"), "adopted": True}
    e = entry(att, procs)
    if e is not None and e != d:
        drv["session"] = procs[e].ident()
    st = info.get("start_time")
    started = st / 1000.0 if isinstance(st, (int, float)) and st else time.time()

    def keep(now):
        if (now.get("ray") or {}).get("driver") or (now.get("exit") or {}).get("state"):
            return False
        now["ray"]["driver"], now["pid"] = drv, d
        now["started_at"] = now.get("started_at") or started
    fd = store.try_lock("status")
    if fd is None:  # a start or stop holds it: what it writes wins
        return att
    try:
        return store.update_attempt(att["attempt"], keep) or att
    finally:
        store.unlock(fd)


def alive(att):
    """Whether the attempt's job is alive (health's and watch's `alive`): its processes here
    by the marker, whatever Ray says (a head that restarted forgets the job, its driver lives)."""
    return bool(processes(att))


def live(store, att):
    """What lives of the attempt for prune's refusal, None when nothing does: the job's
    processes here, or a job Ray lists as active (a Ray that cannot be asked raises)."""
    pids = processes(att)
    info = None if pids else job(att["ray"]["dashboard"], att["ray"]["submission_id"])
    if not pids and (info is None or info.get("status") not in ACTIVE):
        return None
    return {"state": "alive (Ray job %s%s)" % (att["ray"]["submission_id"], ", " + info["status"] if info else ""),
            "attempt": att.get("attempt"), "pid": pids[0] if pids else None, "pids": pids}


def history_row(att):
    """history's entry for a Ray attempt: its job, and its end as Ray said it."""
    r, ex = att["ray"], att.get("exit") or {}
    return {"submission_id": r.get("submission_id"), "node": r.get("node"), "state": ex.get("state"),
            "exit_code": ex.get("exit_code"), "stopped_by": ex.get("stopped_by")}


# --- the job's Ray worker processes (its tasks' and actors' workers: children of a raylet,
# not of the driver, and without the marker) and its detached actors, from Ray's state API

STATE_LIMIT = 10000   # the state API's rows per call (its own default is 100)


def _state(dashboard, kind, job_id=None):
    path = "/api/v0/%s?limit=%d&detail=1" % (kind, STATE_LIMIT)
    if job_id:
        path += "&filter_keys=job_id&filter_predicates=%3D&filter_values=" + job_id
    doc = _json(dashboard, "GET", path)
    return ((doc.get("data") or {}).get("result") or {}).get("result") or []


def nodes(dashboard):
    """{node id: {"ip", "head", "state"}} of every node Ray lists."""
    return {n["node_id"]: {"ip": n.get("node_ip"), "head": bool(n.get("is_head_node")), "state": n.get("state")}
            for n in _state(dashboard, "nodes") if n.get("node_id")}


def unplaceable(dashboard, want):
    """Why no node of the cluster can ever hold a job asking WANT ({resource: amount}), or
    None where one can (or Ray's state API cannot say, or lists no node: the job is then
    submitted, and one Ray keeps PENDING is given up after the settle). Each node's totals, not
    what is free now: a busy node frees its resources, a node without them never has them; a
    node Ray lists DEAD counts too (a node restarting comes back with what it had)."""
    want = {k: v for k, v in (want or {}).items() if v}
    if not want:
        return None
    try:
        live = [n for n in _state(dashboard, "nodes") if n.get("node_id")]
    except AgentFailure:
        return None
    tot = [n.get("resources_total") or {} for n in live]
    if not live or any(all(t.get(k, 0) >= v for k, v in want.items()) for t in tot):
        return None
    alive = [t for n, t in zip(live, tot) if n.get("state") == "ALIVE"]
    return "it asks %s; no node has that much (the cluster's totals: %s; per node: %s)" % (
        ", ".join("%s %g" % kv for kv in sorted(want.items())),
        ", ".join("%s %g" % (k, sum(t.get(k, 0) for t in alive)) for k in sorted(want)),
        "; ".join("%s (%s, %s): %s" % (n["node_id"][:12], n.get("node_ip"), n.get("state"), ", ".join(
            "%s %g" % (k, t.get(k, 0)) for k in sorted(want))) for n, t in zip(live, tot)))


def workers(dashboard, job_id):
    """The Ray job JOB_ID's worker processes, pids sorted per node: each actor of the job not
    DEAD (detached ones too, which Ray keeps after the job by design) and each task's worker.
    `here`: the node's address is the head's, so this agent's /proc is that node's; a process
    on another address is out of its sight (docs/ray.md, Nodes)."""
    found = {}
    for a in _state(dashboard, "actors", job_id):
        if a.get("pid") and a.get("state") != "DEAD" and a.get("node_id"):
            found[(a["node_id"], a["pid"])] = {
                "pid": a["pid"], "node_id": a["node_id"], "kind": "detached actor" if a.get("is_detached") else "actor",
                "actor": {"name": a.get("name") or None, "class": a.get("class_name"), "id": a.get("actor_id"),
                          "namespace": a.get("ray_namespace"), "state": a.get("state")}}
    for t in _state(dashboard, "tasks", job_id):
        key = (t.get("node_id"), t.get("worker_pid"))
        if key[0] and key[1] and not t.get("actor_id") and key not in found:
            found[key] = {"pid": key[1], "node_id": key[0], "kind": "task worker", "task": t.get("name")}
    ns = nodes(dashboard) if found else {}
    head_ip = next((n["ip"] for n in ns.values() if n["head"]), None)
    for w in found.values():
        n = ns.get(w["node_id"]) or {}
        w["node_ip"], w["here"] = n.get("ip"), head_ip is not None and n.get("ip") == head_ip
    return sorted(found.values(), key=lambda w: (w["node_id"], w["pid"]))


def local_workers(ws, procs):
    """{pid: Proc} of the workers WS on this node that live: a Ray worker by its title
    (ray::...), and the same process as first seen (its start time, once known)."""
    out = {}
    for w in ws:
        p = procs.get(w["pid"]) if w["here"] else None
        if p is not None and not p.dead and p.cmdline_raw().startswith(RAY_WORKER) and w.get("start") in (None, p.start):
            w["start"] = p.start
            out[p.pid] = p
    return out


def end_hint(w):
    """How a detached actor is ended: Ray keeps it by design; runward names it, never kills it."""
    a = w.get("actor") or {}
    if a.get("name"):
        return "ray.kill(ray.get_actor(%r, namespace=%r))" % (a["name"], a.get("namespace"))
    return "ray.kill(HANDLE) from a driver that holds a handle to its %s actor (id %s)" % (a.get("class"), a.get("id"))


def job_workers(att):
    """The Ray job's workers alive on this node ("here": {pid: Proc}), those on other nodes
    (out of this agent's sight), or a note where Ray cannot be asked: `stacks` dumps those
    here beside the driver's tree, `gpus` names them the run's (launchers.py)."""
    r = att["ray"]
    try:
        info = job(r["dashboard"], r["submission_id"])
        ws = workers(r["dashboard"], info["job_id"]) if info and info.get("job_id") else []
    except AgentFailure as e:
        return {"here": {}, "workers": [], "note": "the job's Ray workers not read: " + e.message}
    procs = scan()
    return {"here": local_workers(ws, procs), "workers": ws, "driver": (r.get("driver") or {}).get("pid")}


def stack_said(ws, doc):
    """Each dumped worker's role (its actor or task) in the capture; the job's workers on other
    nodes named as not read; the summary says both."""
    role = {w["pid"]: w for w in ws["workers"] if w["here"]}
    if ws.get("driver"):  # the job's own process (entrypoint's command), beside Ray's workers
        role[ws["driver"]] = {"kind": "driver"}
        doc["ray_driver"] = ws["driver"]
    for p in doc.get("procs") or ():
        w = role.get(p.get("pid"))
        if w is not None:
            p["ray"] = {k: w[k] for k in ("kind", "actor", "task", "node_id") if w.get(k) is not None}
    far = [w for w in ws["workers"] if not w["here"]]
    doc["ray_workers_here"] = sorted(ws["here"])
    doc["ray_unchecked"] = [{k: w.get(k) for k in ("pid", "node_id", "node_ip", "kind")} for w in far]
    more = ["%d Ray worker(s) of the job here" % len(ws["here"])] if ws["here"] else []
    if ws.get("driver"):
        more.insert(0, "the job's driver: pid %d" % ws["driver"])
    if far:
        more.append("%d on other nodes not read (%s)" % (len(far), ", ".join(
            "pid %s on %s" % (w["pid"], w.get("node_ip")) for w in far)))
    if ws.get("note"):
        doc["ray_note"] = ws["note"]
        more.append(ws["note"])
    if more:
        doc["summary"] = "; ".join([doc.get("summary") or ""] + more).lstrip("; ")
