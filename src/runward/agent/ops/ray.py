"""start, stop and status of a run that Ray runs (a `ray://` target): this agent runs on the
head, submits a Ray job through the dashboard's Jobs API, and checks its processes in /proc.

The run keeps the same records as any run (~/.runward/runs/NAME/), so logs, watch and health
work on its log: the entrypoint appends the command's output to the attempt's log itself
(`>> LOG 2>&1`), so the log outlives the head's memory of the job. The attempt record adds
{"ray": {"submission_id", "dashboard", "resources", "num_gpus", "driver", ...}} and, once
ended, its exit as Ray said it. docs/ray.md has the state table and what is verified."""

import os
import time

from ..supervise import logfiles
from ..core import ray, rayreaper
from ..core.runspec import GRACE_S, READY_TIMEOUT_S, STOP_SIGNAL
from ..core.procfs import HOME_MARKER, MARKER, scan
from ..proc.runs import log_info, paused
from ..core.secrets import redact_env
from ..core.store import RunStore
from ..proc.terminate import parse_signal, signal_name, terminate
from ..core.wire import AgentFailure, bad_input, event
from . import engine
from .start import LOG_TAIL_LINES, describe_exit, plan_of

POLL_S = 0.1          # the Jobs API is polled: Ray has no event to wait on
PENDING_S = 20.0      # a job still PENDING this long after the settle cannot be placed: given up, stopped
#                       (the target's pending_timeout, where runward.toml gives one: an autoscaler's nodes take minutes)
RAY_END_S = 15.0      # after a stop: Ray's own stop waits RAY_JOB_STOP_WAIT_TIME_S (3 s), then KILLs
PENDING_STOP_S = 3.0  # Ray's stop of a job it has not placed: it stays PENDING (Ray 2.60)
NOTICE_S = 10.0       # after runward's stop ended the driver: Ray records the end at its next poll (0.1 s)
ESCAPED_GRACE_S = 2.0
VERIFIED_BY = ("verified by the marker, the driver's session, the entry's subreaper (every orphan of the job's "
               "tree, env -i and setsid ones too, is its child) and the job's RAY_JOB_ID (on each node); not seen: "
               "a process a Ray worker started before the job (RAY_JOB_ID ffffffff) starts in a new session; left "
               "and named: one the id alone ties to the job while its detached actor lives (it may be the actor's)")


# --- start

def entrypoint(plan, marker, home_id):
    """The job's entrypoint, a shell line Ray runs with /bin/sh -c: it enters the run's
    directory, sets the marker and execs the entry (core/rayreaper.py: a subreaper whose job
    is the command, and whose exit status, the job's, is Ray's driver_exit_code), appending
    its output to runward's log of the attempt.
    The marker is set here, not in runtime_env's env_vars, which Ray also gives its own
    JobSupervisor worker: only the job's processes carry it."""
    import json
    import shlex
    import sys
    return "cd %s && %s=%s %s=%s %s=%s %s=%s exec %s -S -E -c %s >> %s 2>&1" % (
        shlex.quote(plan["cwd"]), MARKER, shlex.quote(marker), HOME_MARKER, shlex.quote(home_id),
        rayreaper.CODE_VAR, shlex.quote(rayreaper.ENTRY), rayreaper.ARGV_VAR, shlex.quote(json.dumps(plan["argv"])),
        shlex.quote(sys.executable), shlex.quote(rayreaper.LOADER), shlex.quote(plan["log"]))


def job_body(req, plan, spec, sid, marker, home_id):
    body = {"entrypoint": entrypoint(plan, marker, home_id), "submission_id": sid,
            "runtime_env": {"env_vars": dict(req.get("env") or {})}, "metadata": {"runward_run": marker}}
    if req.get("gpus"):  # how many: Ray picks which, and sets CUDA_VISIBLE_DEVICES for the driver
        body["entrypoint_num_gpus"] = len(req["gpus"])
    if spec.get("resources"):
        body["entrypoint_resources"] = spec["resources"]
    return body


def refuse_supervision(sup):
    """A policy is kept by the shim (supervise/policy.py), and a Ray job has none: Ray's
    JobSupervisor runs the entrypoint with nobody of runward's waiting on it. A policy saved
    here would never be kept, so it is refused, naming it."""
    sup = {k: v for k, v in (sup or {}).items() if (k, v) != ("restart", "never")}
    if not sup:
        return
    said = ["--" + k.replace("_", "-") for k in sorted(sup) if k != "health"]
    said += ["[health] " + k for k in sorted((sup.get("health") or {})) if k in ("actions", "idle")]
    raise bad_input("a supervision policy on a Ray run: %s; nothing here would keep it (a Ray job has no runward "
                    "shim to restart it, act on its health or notify)" % ", ".join(said),
                    "start without it (`runward watch` and `status` still read the job's health and state)")


def start(req, home):
    spec = req["ray"]
    refuse_supervision(req.get("supervise"))
    if req.get("wait_gpus_free"):
        raise bad_input("--wait-gpus-free reads this host's GPUs; on Ray the cluster places the job",
                        "leave it out: --gpus N asks Ray for N GPUs")
    owned = sorted(k for k in req.get("env") or {} if k in ray.OWNED_VARS)
    if owned:  # Ray's supervisor then never starts the job, and a stop matches processes by the job's id
        raise bad_input("--env %s on a Ray target: runward and Ray set %s for the job's processes (the job's id, "
                        "its raylet), which a stop matches them by; given by the run, Ray never starts the job and "
                        "one run could claim another job's processes" % (", ".join(owned), " and ".join(owned)),
                        "leave %s out of the run's environment (--env, the target's or run's env in runward.toml); "
                        "other RAY_* variables are Ray's settings and pass" % " and ".join(owned))
    hidden = sorted(k for k in req.get("env_from") or {} if k in (req.get("env") or {}))
    if hidden:  # Ray keeps runtime_env in its job record: the promise of --env NAME cannot hold there
        raise bad_input("--env %s: a value passed by name (or --env-file) is never stored on the target, and Ray "
                        "keeps a job's environment in its job record, shown to every reader of its dashboard"
                        % ", ".join(hidden), "give it as --env NAME=VALUE where Ray may show it, or have the job "
                        "read it from a file on the nodes")
    version = ray.check_api(spec["dashboard"])  # no Jobs API: said before anything is written
    want = dict(spec.get("resources") or {}, GPU=len(req.get("gpus") or ()))
    why = ray.unplaceable(spec["dashboard"], want)
    if why:  # Ray would keep it PENDING for ever: refused, nothing submitted
        raise bad_input("no node of the Ray cluster at %s can ever place %s's job: %s" % (
            spec["dashboard"], req.get("name"), why), "ask for resources a node has: the target's resources "
            "option, --gpus N (`ray status` on the head lists each node's)")
    store = RunStore(home, req.get("name"))
    plan = plan_of(req, home, store)
    fd = store.lock("start", req.get("lock_timeout"))
    replaced = None
    try:
        prev = store.latest()
        if prev and prev.get("ray") and _alive(prev):
            if not req.get("replace"):
                raise AgentFailure("AlreadyRunning", "run %s is already Ray job %s" % (
                    store.name, prev["ray"]["submission_id"]), "use `runward restart %s`, or start with --replace" % store.name)
            replaced = _stop_job(store, prev, req.get("replace_signal") or prev.get("stop_signal", STOP_SIGNAL),
                                 float(prev.get("grace", GRACE_S)))
        n, log_from = _submit(store, req, home, plan, spec, version)
    finally:
        store.unlock(fd)
    return _verify_start(store, n, plan, log_from, float(req.get("ready_timeout", READY_TIMEOUT_S)), replaced)


def _alive(att):
    """Whether a recorded attempt lives: its processes here, or Ray lists its job active."""
    if ray.processes(att):
        return True
    if (att.get("exit") or {}).get("state"):
        return False
    info = ray.job(att["ray"]["dashboard"], att["ray"]["submission_id"])
    return info is not None and info["status"] in ray.ACTIVE


def _submit(store, req, home, plan, spec, version):
    """Submit the attempt (ops/engine.py: the log's header and the records around it; a
    refused submission leaves nothing)."""
    run, n, fresh = engine.next_attempt(store)
    marker = "%s.%d" % (store.name, n)
    # Ray refuses a submission id it has seen: one per attempt, and per home and boot
    sid = "runward-%s-%d-%s" % (store.name, n, os.urandom(4).hex())

    def send():
        ray.submit(spec["dashboard"], job_body(req, plan, spec, sid, marker, home.id))
        kept = {"submission_id": sid, "dashboard": spec["dashboard"], "resources": spec.get("resources") or {},
                "num_gpus": len(req.get("gpus") or ()), "ray_version": version, "submitted_at": time.time()}
        if spec.get("pending_timeout") is not None:
            kept["pending_timeout"] = float(spec["pending_timeout"])
        return kept, {"submission_id": sid}
    return engine.submit(store, req, home, plan, run, n, fresh, marker, "ray", send)


def _verify_start(store, n, plan, log_from, ready_timeout, replaced=None):
    """Started = Ray says RUNNING and the driver lives here (pid, start) through the settle
    (and until the ready line); an end during it is ExitedEarly with Ray's driver_exit_code;
    a job Ray cannot place (PENDING past the settle and the pending bound) is stopped and said."""
    att = store.attempt(n)
    sid, dash = att["ray"]["submission_id"], att["ray"]["dashboard"]
    res = {"name": store.name, "attempt": n, "submission_id": sid, "pid": None, "log": plan["log"],
           "settle_s": plan["settle"], "ray": att["ray"], "env": redact_env(att.get("env")), "replaced": replaced}
    t0, running_since, drv = time.monotonic(), None, None
    ready = engine.ReadyWatch(plan, log_from)
    while True:
        info = ray.job(dash, sid) or {"status": "UNKNOWN"}
        now = time.monotonic()
        if info["status"] not in ray.ACTIVE:
            return _ended_early(store, att, info, res, t0 + plan["settle"])
        if info["status"] == "RUNNING":
            procs = scan()
            d = ray.driver(att, procs)
            if d is not None and (drv is None or drv["pid"] != d):
                drv = {"pid": d, "start": procs[d].start, "node_id": info.get("driver_node_id")}
                e = ray.entry(att, procs)
                if e is not None and e != d:  # the session's leader: the entry above the job
                    drv["session"] = procs[e].ident()
                running_since = now
                _record_driver(store, att, drv)
            elif d is None:  # gone while Ray still says RUNNING: not settled; Ray's word on its end follows
                running_since = None
        ready.read()
        if running_since is not None and now - running_since >= plan["settle"] and ready.done():
            break
        if running_since is not None and ready.re is not None and now - running_since >= ready_timeout:
            break
        if running_since is None and now - t0 >= plan["settle"] + _pending_s(att):
            if info["status"] == "RUNNING":  # placed where this agent cannot see
                return _elsewhere(store, att, info, res)
            return _unplaced(store, att, info, res)
        time.sleep(POLL_S)
    res.update({"state": "running", "ray_state": info["status"], "pid": drv["pid"], "driver": drv,
                "node_id": drv["node_id"], "waited_s": round(time.monotonic() - t0, 3),
                "alive_after_settle": True, "verified": ["ray_running", "driver_alive_after_settle"],
                "node_pids": ray.processes(att), "first_lines": logfiles.first_lines(plan["log"], log_from, 10)})
    ready.said(res, "Ray job %s" % sid, ready_timeout)
    return res


def _record_driver(store, att, drv):
    att["ray"]["driver"] = drv
    att["started_at"] = att.get("started_at") or time.time()
    att["pid"] = drv["pid"]

    def keep(now):
        now["ray"]["driver"], now["started_at"], now["pid"] = drv, att["started_at"], drv["pid"]
    store.update_attempt(att["attempt"], keep)
    # an interrupted CLI says the driver's pid, not only the job's id (operations/start.py)
    event({"started": {"attempt": att["attempt"], "pid": drv["pid"], "submission_id": att["ray"]["submission_id"]}})


def _ended_early(store, att, info, res, until):
    att = store.attempt(att["attempt"]) or att  # a stop marks the record before it signals
    record_end(store, att, info)
    ex = att.get("exit") or {}
    res.update({"alive_after_settle": False, "state": ray.STATES.get(info["status"], "lost"),
                "ray_state": info["status"], "exit": ex, "last_lines": logfiles.tail(att["log"], LOG_TAIL_LINES)})
    if att.get("stop_requested"):  # not an early exit: `runward stop` ended it, as on every target
        raise AgentFailure("Cancelled", "start of %s cancelled: stopped by `runward stop` during the settle period "
                           "(%s)" % (store.name, describe_exit(ex) if "exit_code" in ex else "Ray: %s, no exit code" % (
                               ex.get("state") or info["status"])), result=res)
    if info["status"] != "STOPPED":
        _strays(store, att, info, res, until)
    raise AgentFailure("ExitedEarly", "%s: Ray job %s ended during the settle period: %s, driver_exit_code %s" % (
        store.name, att["ray"]["submission_id"], info["status"], ex.get("exit_code", "?")),
        "see the last log lines; `runward logs %s`" % store.name, result=res)


def _strays(store, att, info, res, until):
    """The driver ended during the settle and processes of the run live on (a backgrounded
    child): as on every target, they are the run's (status: stray), named, exit 5; they are
    looked for to the settle's end (one may be on its way out)."""
    procs = scan()
    left = ray.processes(att, procs)
    while left and time.monotonic() < until:
        time.sleep(POLL_S)
        procs = scan()
        left = ray.processes(att, procs)
    if not left:
        return
    res.update({"state": "stray", "children": [procs[p].describe() for p in left]})
    raise AgentFailure("NotVerified", "%s: Ray job %s's driver exited during the settle period (Ray: %s, "
                       "driver_exit_code %s), and %d process(es) it started run on: %s; they are the run's (status: "
                       "stray), but no job of theirs is watched, nor its exit recorded" % (
                           store.name, att["ray"]["submission_id"], info["status"],
                           (att.get("exit") or {}).get("exit_code", "?"), len(left),
                           ", ".join("pid %d %s" % (d["pid"], d["cmd"]) for d in res["children"])),
                       "exec the job instead of backgrounding it (--sh 'exec python3 train.py', no & or nohup; in "
                       "run.sh: exec python3 train.py), then `runward start %s --replace`; or keep them as they "
                       "are: `runward status %s` lists them, `runward stop %s` ends them" % ((store.name,) * 3),
                       result=res)


def _elsewhere(store, att, info, res):
    """Ray says RUNNING, but no driver of the job is on this host: it runs on another node,
    whose /proc only an agent there could read. Left running, said as not verified (exit 5)."""
    res.update({"state": "running", "ray_state": info["status"], "node_id": info.get("driver_node_id"),
                "alive_after_settle": None, "verified": ["ray_running"]})
    raise AgentFailure("NotVerified", "%s: Ray says job %s is RUNNING on node %s, but its driver is not on this "
                       "host: its process is not verified" % (store.name, att["ray"]["submission_id"],
                                                              str(info.get("driver_node_id"))[:12]),
                       "`runward status %s` follows it through Ray; verifying another node needs an agent there "
                       "(docs/ray.md, Nodes)" % store.name, result=res)


def _unplaced(store, att, info, res):
    """A job Ray keeps PENDING (no node has its resources): stopped, verified, and said."""
    try:
        stopped, left = _stop_job(store, att, att["stop_signal"], ESCAPED_GRACE_S), None
    except AgentFailure as e:  # survivors, or a job Ray's stop leaves PENDING: said, never "stopped"
        stopped, left = e.details.get("result") or {}, e.message
    res.update({"state": "stopped" if left is None else "stop_not_verified", "ray_state": info["status"],
                "stopped": stopped})
    raise bad_input("Ray could not place %s's job %s: still PENDING after %gs (%s); %s" % (
        store.name, att["ray"]["submission_id"], att["settle"] + _pending_s(att), info.get("message") or
        "no reason given", "it was stopped (verified)" if left is None else "its stop is NOT verified: " + left),
        "ask for resources the cluster has (`ray status` on the head lists them): the target's resources "
        "option, --gpus N; or wait longer for them (an autoscaler's new nodes): the target's pending_timeout",
        result=res)


def _pending_s(att):
    """How long after the settle a job Ray keeps PENDING is waited for: the target's
    pending_timeout, else PENDING_S."""
    return float(att["ray"].get("pending_timeout", PENDING_S))


def record_end(store, att, info):
    """Keep the job's end as Ray said it in the attempt record: the head forgets its jobs
    when it restarts, and health's exit fact reads it from there. stopped_by: who stopped it."""
    if (att.get("exit") or {}).get("state") or info is None or info.get("status") in ray.ACTIVE:
        return
    ex = ray.exit_fact(info)
    if att.get("stop_requested"):  # its KILL is the stop's, not the kernel's OOM killer's
        ex["stopped_by"], ex["stopped"] = "runward", True
    elif info["status"] == "STOPPED":
        ex["stopped_by"] = "someone else"  # `ray job stop`, the dashboard, another client
    store.keep_end(att, ex)
    if att["exit"] is ex and ex.get("ray_started_at"):  # the run's time is Ray's, end_time - start_time
        att["started_at"] = ex["ray_started_at"]
        store.update_attempt(att["attempt"], lambda now: now.update(started_at=ex["ray_started_at"]))


# --- stop

def stop(req, home):
    store = RunStore.existing(home, req.get("name"))
    fd = store.lock("stop", req.get("lock_timeout"))
    try:
        att = store.latest()
        sig, grace = engine.stop_terms(req, att)
        return _stop_job(store, att, sig, grace)
    finally:
        store.unlock(fd)


def _members(att, scope=None):
    """The run's processes here: by the marker and the driver's session, and (SCOPE, from
    ray.job_scope) by the job's RAY_JOB_ID."""
    procs = scan()
    pids = set(ray.processes(att, procs)) | set(ray.job_id_processes(scope, procs) if scope else ())
    return {p: procs[p] for p in pids}


def _stop_job(store, att, sig, grace):
    """runward's stop of a Ray job: the stop signal to every process of the job here (by the
    marker: setsid and double-fork escapees too; the driver's session), KILL after the grace
    (_end_job); Ray's end awaited (Ray's stop for a job still active), and every process of
    the run verified gone from this host."""
    sid, dash = att["ray"]["submission_id"], att["ray"]["dashboard"]
    sig = signal_name(parse_signal(sig))
    res = {"name": store.name, "attempt": att.get("attempt"), "submission_id": sid, "signal": sig,
           "grace_s": grace, "ray": att["ray"]}
    t0 = time.monotonic()
    info = ray.job(dash, sid)  # a dashboard that does not answer: nothing is sent
    job_id = (info or {}).get("job_id")
    seen = ray.workers(dash, job_id) if job_id else []  # Ray's word on the job's workers, before its stop
    ours = [w for w in seen if w["kind"] != "detached actor"]
    kept = [w for w in seen if w["kind"] == "detached actor" and w["here"]]
    scope = ray.job_scope(att, info, [w["pid"] for w in kept], [w["pid"] for w in ours if w["here"]],
                          [(w.get("actor") or {}).get("name") or "(no name)" for w in kept])
    members = {**_members(att, scope), **ray.local_workers(ours, scan())}
    active = info is not None and info["status"] in ray.ACTIVE
    res["already_stopped"] = not members and not active
    fates = []
    if not res["already_stopped"]:
        store.update_attempt(att["attempt"], lambda now: now.update(stop_requested=time.time()))
        att["stop_requested"] = time.time()
        fates, info = _end_job(att, res, members, ours, sig, grace, info if active else None, scope)
    if info is None and not (att.get("exit") or {}).get("state"):
        info = {"status": "STOPPED" if not res["already_stopped"] else "UNKNOWN",
                "message": "Ray no longer knows the job (its head restarted?)"}
    record_end(store, att, info)
    res.update(_leave_check(att, sig, scope))
    res["verified_by"] = VERIFIED_BY
    res["processes"] = fates + res["processes"]
    _workers_check(res, att, job_id, seen, info, sig, scope)
    _job_id_said(res, scope)
    res["detached_processes"] = ray.held_left(scope, scan())
    ex = att.get("exit") or {}
    res.update({"ray_state": (info or {}).get("status") or ex.get("state"), "exit": ex,
                "state": ray.state_of(ex), "stop_s": round(time.monotonic() - t0, 3)})
    res["verified"] = ["ray_job_ended"] * (res["ray_state"] in ray.STATES and res["ray_state"] not in ray.ACTIVE) + \
        ["no_process_of_run_alive"] * bool(res["verified_dead"] and not res["unchecked"])
    if not res["verified_dead"]:
        raise AgentFailure("NotVerified", "%s: %d process(es) of Ray job %s survived the stop: %s" % (
            store.name, len(res["survivors"]), sid, ", ".join(str(s["pid"]) for s in res["survivors"])),
            "see each one's state (D: stuck in the kernel); `runward ps` names them", result=res)
    if res["unchecked"]:
        raise AgentFailure("NotVerified", "%s: %d process(es) of Ray job %s are on nodes this agent cannot see, "
                           "unchecked: %s" % (store.name, len(res["unchecked"]), sid, ", ".join(
                               "pid %s on node %s (%s)" % (u["pid"], str(u["node_id"])[:12], u.get("node_ip"))
                               for u in res["unchecked"])),
                           "this agent reads the head's /proc only; check those nodes (`ray list workers "
                           "--filter node_id=ID` on the head, or ps there) (docs/ray.md, Nodes)", result=res)
    if res["ray_state"] in ray.ACTIVE:  # no process here, but Ray keeps the job: it may yet run
        raise AgentFailure("NotVerified", "%s: Ray still says %s for job %s %gs after its stop (Ray's stop does not "
                           "end a job it has not placed yet): it may start when the cluster can place it" % (
                               store.name, res["ray_state"], sid, RAY_END_S),
                           "`runward stop %s` again ends it once it runs; or free the resources it waits for and "
                           "stop it then; `runward status %s` follows it" % (store.name, store.name), result=res)
    return res


def _end_job(att, res, members, ours, sig, grace, info, scope=None):
    """runward's own stop first, as on every target: its signal, its grace, then KILL, to the
    snapshot MEMBERS (each one's fate: runward sent every signal). Ray sees its driver end by
    itself (it polls it every 0.1 s) and records it; Ray's stop (its own SIGTERM, KILL 3 s
    later) is sent only to a job still active then (INFO: Ray's record of an active job): one
    PENDING, or a driver out of this host's sight. (fates, Ray's record after)."""
    sid, dash = att["ray"]["submission_id"], att["ray"]["dashboard"]
    fates = []
    if members:
        fates = terminate(members, scan(), parse_signal(sig), grace,
                          find_more=lambda: {**_members(att, scope), **ray.local_workers(ours, scan())})
    res["ray_stop_sent"] = False
    if info is None:
        return fates, info
    info = _await_end(dash, sid, NOTICE_S if members else 0)
    if info is not None and info["status"] in ray.ACTIVE:
        res["ray_stop_sent"] = ray.stop(dash, sid)
        info = _await_end(dash, sid, RAY_END_S if info["status"] == "RUNNING" else PENDING_STOP_S)
    if info is not None and info["status"] == "PENDING":  # Ray's stop leaves a job not placed waiting
        res["pending_end"] = ray.end_pending(dash, sid) or "its JobSupervisor actor killed"
        info = _await_end(dash, sid, RAY_END_S)
    return fates, info


def _await_end(dash, sid, wait_s):
    """Ray's record once the job is no longer active (None: forgotten), polled; still active
    after WAIT_S is returned as it is (the stop is then not verified by Ray)."""
    deadline = time.monotonic() + wait_s
    while True:
        info = ray.job(dash, sid)
        if info is None or info["status"] not in ray.ACTIVE or time.monotonic() >= deadline:
            return info
        time.sleep(POLL_S)


def _leave_check(att, sig, scope=None):
    """The last look: a process of the run forked during the stop, or one Ray's end left,
    is ended by runward (the stop signal, then KILL) and named."""
    left = _members(att, scope)
    if not left:
        return {"verified_dead": True, "processes": [], "survivors": []}
    fates = terminate(left, scan(), parse_signal(sig), ESCAPED_GRACE_S)
    survivors = [f for f in fates if f["fate"] == "survived"]
    return {"verified_dead": not survivors, "processes": fates, "survivors": survivors, "outlived_ray": sorted(left)}


def _workers_check(res, att, job_id, seen, info, sig, scope=None):
    """The job's Ray workers after the stop (Ray's state API asked again: a worker started
    during the stop too): one still alive here is ended (the stop signal, then KILL) and its
    fate said; one on a node whose address is not the head's is `unchecked`, never counted
    dead; a detached actor, which Ray keeps by design, is named with how to end it, never
    killed. The driver placed on such a node is unchecked too."""
    dash = att["ray"]["dashboard"]
    byid = {(w["node_id"], w["pid"]): w for w in seen}
    try:
        for w in (ray.workers(dash, job_id) if job_id else []):
            byid.setdefault((w["node_id"], w["pid"]), w)["ray_says"] = (w.get("actor") or {}).get("state")
    except AgentFailure as e:  # the stop is sent: those seen before it are still checked, and this said
        res["workers_note"] = "Ray's state API not asked again after the stop: " + e.message
    ours = sorted((w for w in byid.values() if w["kind"] != "detached actor"), key=lambda w: (not w["here"], w["pid"]))
    late = terminate(ray.local_workers([w for w in ours if w["here"]], scan()), scan(), parse_signal(sig),
                     ESCAPED_GRACE_S)
    res["processes"] += late
    res["survivors"] += [f for f in late if f["fate"] == "survived"]
    fate = {f["pid"]: f["fate"] for f in res["processes"]}
    live = scan()
    for w in ours:
        w["fate"] = "unchecked" if not w["here"] else fate.get(
            w["pid"], "alive" if ray.local_workers([w], live) else "gone")
    res["detached_actors"] = [dict(w, end_with=ray.end_hint(w)) for w in byid.values() if w["kind"] == "detached actor"]
    for w in res["detached_actors"]:
        w["alive"] = bool(ray.local_workers([w], live)) if w["here"] else None
    res["workers"] = ours
    res["unchecked"] = [w for w in ours if not w["here"]]
    far = _driver_far(att, dash, info)
    if far:
        res["unchecked"].insert(0, far)
    if res["unchecked"]:  # what the agent on each of those nodes looks for (transport/nodeagents.py)
        res["node_check"] = {"marker": att.get("marker"), "home_id": att.get("home_id")}
        if scope:  # and by the job's RAY_JOB_ID there, as here (raynode.py, ray.node_scope)
            res["node_check"].update(job_id=scope["job_id"], job_since=ray.scope_epoch(scope), detached=[
                {"pid": w["pid"], "node_id": w["node_id"], "name": (w.get("actor") or {}).get("name") or "(no name)"}
                for w in byid.values() if w["kind"] == "detached actor" and not w["here"]])
    res["verified_dead"] = not res["survivors"]


def _job_id_said(res, scope):
    """Each process found by the job's RAY_JOB_ID alone (not one of Ray's listed workers) with
    its fate, as the workers' are said: `job_id_processes`."""
    workers = {w["pid"] for w in res["workers"] if w["here"]}
    res["job_id_processes"] = [dict(f, ray_job_id=scope["job_id"]) for f in res["processes"]
                               if scope and f["pid"] in scope["found"] - workers]


def _driver_far(att, dash, info):
    """The job's driver, when it was never seen here and Ray placed it on a node whose address
    is not the head's (or Ray cannot say where that node is: never counted dead either)."""
    node = (info or {}).get("driver_node_id")
    if not node or att["ray"].get("driver"):
        return None
    try:
        ns = ray.nodes(dash)
    except AgentFailure:
        ns = {}
    head_ip = next((n["ip"] for n in ns.values() if n["head"]), None)
    if node in ns and ns[node]["ip"] == head_ip:
        return None
    return {"pid": int((info.get("driver_info") or {}).get("pid") or 0) or None, "node_id": node,
            "node_ip": (ns.get(node) or {}).get("ip"), "kind": "driver", "here": False, "fate": "unchecked"}


# --- status (state.status_of hands a Ray attempt here)

def status_of(store, att, with_details=True):
    att = ray.adopt(store, att)  # a start interrupted before it saw the driver: found now
    r = att["ray"]
    out = {"name": store.name, "attempt": att.get("attempt"), "argv": att.get("argv"), "cwd": att.get("cwd"),
           "started_at": att.get("started_at"), "log": log_info(att.get("log")), "ray": r,
           "submission_id": r["submission_id"], "pid": att.get("pid")}
    procs = scan()
    found = ray.processes(att, procs)
    drv = r.get("driver") or {}
    driver_alive = drv.get("pid") in procs and procs[drv["pid"]].start == drv.get("start") and not procs[drv["pid"]].dead
    info, ex = None, att.get("exit") or {}
    if not ex.get("state"):
        try:
            info = ray.job(r["dashboard"], r["submission_id"])
        except AgentFailure as e:
            if not driver_alive:  # nothing here says what became of it: unknown, said as such (exit 3)
                raise
            out["note"] = "Ray could not be asked (%s); the driver's state is read from /proc" % e.message
        if not driver_alive and info is not None:
            record_end(store, att, info)
            ex = att.get("exit") or {}
    out["ray_state"] = (info or {}).get("status") or ex.get("state")
    if driver_alive:
        out["state"] = "running"
        if info is None and "note" not in out:
            out["note"] = "Ray no longer knows job %s (its head restarted?); its driver lives here" % r["submission_id"]
        elif info is not None and info["status"] != "RUNNING":
            out["note"] = "Ray says %s, but its driver (pid %d) is alive here" % (info["status"], drv["pid"])
    elif ex.get("state"):
        out.update({"state": ray.state_of(ex), "exit": ex, "stopped_by": ex.get("stopped_by")})
        if ex.get("error_type") and "exit_code" not in ex:  # Ray's failure, not the program's end
            out["note"] = "Ray says %s (%s) on node %s; the driver's exit status is unknown" % (
                ex["state"], ex["error_type"], str(ex.get("node_id"))[:12])
    elif info is not None and info["status"] in ray.ACTIVE and drv.get("pid"):
        # the driver was seen here at start and is gone, while Ray has not noticed yet (its
        # node died: Ray says FAILED some seconds later): the process is the fact
        out.update({"state": "lost", "note": "Ray still says %s, but the driver (pid %d, node %s) is no longer "
                                             "alive" % (info["status"], drv["pid"], str(drv.get("node_id"))[:12])})
    elif info is None:
        out.update({"state": "lost", "note": "Ray no longer knows job %s (its head restarted?) and its driver is not "
                                             "alive here; its exit status is unknown" % r["submission_id"]})
    else:
        out["state"] = ray.STATES.get(info["status"], "lost")
    out["node_pids"] = found
    held = paused({pid: procs[pid] for pid in found if pid in procs}, drv.get("pid")) if out["state"] == "running" else None
    if held:  # stopped by a signal or a debugger: alive, making no progress, as on every target
        out["paused"] = held
    if found and not driver_alive:
        out["survivors"] = found
        if out["state"] == "exited":  # the job's exit is not the run's end: stop still has work
            left = "%d of its processes are still alive: stop ends them" % len(found)
            out.update({"state": "stray", "stray_processes": found,
                        "note": out["note"] + "; " + left if out.get("note") else "the job exited; " + left})
    return out
