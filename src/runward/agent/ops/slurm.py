"""start, stop and status of a run that Slurm schedules (a `slurm://` target): this agent
runs on the login node, submits with sbatch, and reads the job's state from Slurm.

The run keeps the same records as any run (~/.runward/runs/NAME/), so logs, watch and health
work on its log, which is the job's output file (`--open-mode=append`); the attempt record
adds {"slurm": {"job_id", "partition", "script", ...}}. The generated batch script is kept
beside the attempt's record (attempts/N.sbatch). docs/slurm.md has the state table."""

import os
import time

from ..supervise import logfiles
from ..core import slurm
from ..core.runspec import GRACE_S, READY_TIMEOUT_S, STOP_SIGNAL
from ..core.procfs import HOME_MARKER, MARKER, protected, scan
from ..proc.runs import log_info
from ..core.secrets import redact_env
from ..core.store import RunStore, remove_file
from ..proc.terminate import parse_signal, signal_name, terminate
from ..core.wire import AgentFailure, bad_input
from . import engine
from .start import LOG_TAIL_LINES, plan_of

POLL_S = 0.1         # squeue is polled: Slurm has no event to wait on
KILL_WAIT_S = 90.0   # after the plain scancel: Slurm's KillWait (30 s here) and its cleanup
NODE_WAIT_S = 3.0    # slurmstepd has killed what it tracks when the job leaves the queue
ESCAPED_GRACE_S = 2.0
FIRST_LOOK_S = 30.0  # a job pending with reason None has not been looked at by the scheduler yet
OPTIONS = {"account": "--account", "time": "--time", "gpus": "--gpus", "nodes": "--nodes",
           "ntasks_per_node": "--ntasks-per-node"}


# --- start

def sbatch_args(spec, store, n, plan):
    """sbatch's options for this attempt (before the script's path)."""
    args = ["--partition=" + spec["partition"], "--job-name=" + store.name, "--output=" + plan["log"],
            "--open-mode=append", "--chdir=" + plan["cwd"], "--export=ALL"]
    opts = spec.get("options") or {}
    for key, flag in OPTIONS.items():
        if opts.get(key) is not None:
            args.append("%s=%s" % (flag, opts[key]))
    args += [str(a) for a in opts.get("extra") or []]
    return args


def script_text(store, n, plan, opts):
    """The batch script: it execs the command, so the job's exit status is the command's.
    With nodes > 1 (or srun = true) it runs one task per node through srun, each with the
    rank environment (NODE_RANK, NNODES, MASTER_ADDR, MASTER_PORT) from Slurm's own;
    MASTER_ADDR is the first node's NodeAddr (a node's name need not resolve elsewhere)."""
    import shlex
    cmd = " ".join(shlex.quote(a) for a in plan["argv"])
    lines = ["#!/bin/sh", "# runward: run %s attempt %d (generated; docs/slurm.md)" % (store.name, n)]
    if int(opts.get("nodes") or 1) > 1 or opts.get("srun"):
        lines += ['MASTER_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
                  "MASTER_ADDR=$(scontrol show node -o \"$MASTER_NODE\" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')",
                  'export MASTER_ADDR="${MASTER_ADDR:-$MASTER_NODE}" MASTER_PORT="${MASTER_PORT:-29500}" NNODES="$SLURM_NNODES"',
                  "exec srun --kill-on-bad-exit=1 %s /bin/sh -c 'NODE_RANK=\"$SLURM_NODEID\" "
                  "exec \"$@\"' runward-rank %s" % (
                      "" if opts.get("ntasks_per_node") else "--ntasks-per-node=1", cmd)]
    else:
        lines.append("exec " + cmd)
    return "\n".join(lines) + "\n"


def start(req, home):
    spec = req["slurm"]
    if not spec.get("partition"):
        raise bad_input("no Slurm partition given", "write slurm://LOGIN/PARTITION")
    if req.get("gpus") is not None or req.get("wait_gpus_free"):
        raise bad_input("--gpus names a host's GPU indexes; on Slurm the scheduler picks them",
                        "ask for GPUs with the target's gpus option in runward.toml (sbatch --gpus)")
    _refuse_supervision(req.get("supervise"))
    slurm.command("sbatch")  # no Slurm here: said before anything is written
    store = RunStore(home, req.get("name"))
    plan = plan_of(req, home, store)
    fd = store.lock("start", req.get("lock_timeout"))
    replaced = None
    try:
        prev = store.latest()
        if prev and prev.get("slurm"):  # a recorded end too: a requeued job is live again
            st = requeued(store, prev) or (None if (prev.get("exit") or {}).get("state")
                                           else slurm.job_state(prev["slurm"]["job_id"]))
            if st is not None and st["state"] in slurm.ACTIVE:
                if not req.get("replace"):
                    raise AgentFailure("AlreadyRunning", "run %s is already Slurm job %s (%s)" % (
                        store.name, prev["slurm"]["job_id"], st["state"]),
                        "use `runward restart %s`, or start with --replace" % store.name)
                replaced = _stop_job(store, prev, req.get("replace_signal") or prev.get("stop_signal", STOP_SIGNAL),
                                     float(prev.get("grace", GRACE_S)))
        n, log_from = _submit(store, req, home, plan, spec)
    finally:
        store.unlock(fd)
    res = _verify_start(store, n, plan, log_from, float(req.get("ready_timeout", READY_TIMEOUT_S)), replaced)
    return res


def _refuse_supervision(sup):
    """A policy is kept by the shim (supervise/policy.py), and a Slurm job has none: Slurm runs the
    batch script with nobody of runward's waiting on it. A policy saved here would never be
    kept (no restart, no health action, no notification), so it is refused, naming it."""
    sup = {k: v for k, v in (sup or {}).items() if (k, v) != ("restart", "never")}
    if not sup:
        return
    said = ["--" + k.replace("_", "-") for k in sorted(sup) if k != "health"]
    acts = (sup.get("health") or {}).get("actions") or {}
    if acts:
        said.append("[health] actions " + ", ".join("%s = %r" % kv for kv in sorted(acts.items())))
    if (sup.get("health") or {}).get("idle"):
        said.append("[health] idle")
    raise bad_input("a supervision policy on a Slurm run: %s; nothing here would keep it (a Slurm job has no "
                    "runward shim to restart it, act on its health or notify)" % "; ".join(said),
                    "start without it (`runward watch` and `status` still read the job's health and state), or "
                    "use Slurm's own: sbatch --requeue, --mail-type (the target's extra options, docs/slurm.md)")


def _submit(store, req, home, plan, spec):
    """Write the batch script and submit it (ops/engine.py: the log's header and the records
    around it; a refused sbatch leaves nothing, the script removed too)."""
    run, n, fresh = engine.next_attempt(store)
    env = plan["env"]
    env[MARKER], env[HOME_MARKER] = "%s.%d" % (store.name, n), home.id
    script = os.path.join(store.dir, "attempts", "%d.sbatch" % n)
    opts = spec.get("options") or {}
    with open(script, "w") as f:
        f.write(script_text(store, n, plan, opts))
    os.chmod(script, 0o700)

    def send():
        job_id = slurm.submit(sbatch_args(spec, store, n, plan) + [script], env)
        return ({"job_id": job_id, "partition": spec["partition"], "options": opts, "script": script,
                 "submitted_at": time.time()}, {"job_id": job_id})
    return engine.submit(store, req, home, plan, run, n, fresh, env[MARKER], "slurm", send,
                         undo=lambda: remove_file(script))


def _verify_start(store, n, plan, log_from, ready_timeout, replaced=None):
    """Pending: wait out the settle for it to start (and the scheduler's first look at it,
    while its reason is None), then say it pends and why. Running:
    watched through the settle (and until the ready line), an early end reported at once
    with Slurm's state and ExitCode."""
    att = store.attempt(n)
    job_id = att["slurm"]["job_id"]
    t0 = time.monotonic()
    res = {"name": store.name, "attempt": n, "job_id": job_id, "pid": None, "log": plan["log"],
           "settle_s": plan["settle"], "slurm": att["slurm"], "env": redact_env(att.get("env")),
           "replaced": replaced}
    ready = engine.ReadyWatch(plan, log_from)
    running_since = None
    while True:
        st = slurm.job_state(job_id) or {"state": "UNKNOWN", "source": "none"}
        now = time.monotonic()
        if st["state"] in ("RUNNING", "COMPLETING") and running_since is None:
            running_since = now
            att["started_at"] = time.time()
            store.update_attempt(n, lambda now: now.update(started_at=att["started_at"]))
        ready.read()
        if st["state"] not in slurm.ACTIVE:
            return _ended_early(store, n, att, st, res, log_from)
        settled = running_since is not None and now - running_since >= plan["settle"]
        if settled and ready.done():
            break
        if running_since is None and now - t0 >= plan["settle"] and (
                st.get("reason") not in ("None", "", None) or now - t0 >= FIRST_LOOK_S):
            break  # still pending after the settle, for a reason Slurm gives: say so, with it
        if running_since is not None and ready.re is not None and now - running_since >= ready_timeout:
            break
        time.sleep(POLL_S)
    res.update({"state": slurm.STATES.get(st["state"], st["state"].lower()), "slurm_state": st["state"],
                "reason": st.get("reason"), "nodes": st.get("nodes"), "waited_s": round(time.monotonic() - t0, 3),
                "first_lines": logfiles.first_lines(plan["log"], log_from, 10)})
    if running_since is None:
        res.update({"pending": True, "verified": ["submitted", "pending"]})
        return res
    res.update({"alive_after_settle": True, "verified": ["alive_after_settle"], "node_pids": _node_pids(store, att)})
    ready.said(res, "job %s" % job_id, ready_timeout)
    return res


def _ended_early(store, n, att, st, res, log_from):
    record_end(store, att, st)
    res.update({"alive_after_settle": False, "state": slurm.STATES.get(st["state"], "lost"),
                "slurm_state": st["state"], "exit": att.get("exit"),
                "last_lines": logfiles.tail(att["log"], LOG_TAIL_LINES)})
    raise AgentFailure("ExitedEarly", "%s: Slurm job %s ended during the settle period: %s, ExitCode %s%s" % (
        store.name, att["slurm"]["job_id"], st["state"], st.get("exit_code") or "?",
        " (%s)" % st["reason"] if st.get("reason") not in (None, "", "None") else ""),
        "see the last log lines; `runward logs %s`" % store.name, result=res)


def record_end(store, att, st):
    """Keep the job's final state and ExitCode in the attempt record: scontrol forgets the
    job after MinJobAge, and health's exit fact reads it from there."""
    if (att.get("exit") or {}).get("state") or st is None or st["state"] in slurm.ACTIVE:
        return
    ex = {k: st[k] for k in ("code", "signal", "exit_code", "start", "end") if st.get(k) not in (None, "", "Unknown")}
    ex.update({"at": time.time(), "state": st["state"], "source": st.get("source")})
    store.keep_end(att, ex)


def requeued(store, att):
    """What Slurm says now wins over an end recorded earlier: a job requeued after it
    (`scontrol requeue`, or Slurm's own on a node failure) is the same job id, PENDING then
    RUNNING again. Then the recorded end moves to the attempt's "requeued" list (its history)
    and the live squeue state is returned; else None. A job COMPLETING is still ending."""
    if not (att.get("exit") or {}).get("state"):
        return None
    q = slurm.queued(att["slurm"]["job_id"])
    if q is None or q["state"] not in slurm.ACTIVE or q["state"] == "COMPLETING":
        return None
    if not slurm.same_job(q, att):  # the id names another job now (a controller that lost its state)
        return None

    def reopen(now):  # under the record lock, as store.keep_end writes the end
        if not (now.get("exit") or {}).get("state"):
            return False
        now.setdefault("requeued", []).append(dict(now.pop("exit"), seen_active_again=q["state"]))
    now = store.update_attempt(att["attempt"], reopen)
    att.pop("exit", None)
    att["requeued"] = now.get("requeued") or []
    return q


def _node_pids(store, att, procs=None):
    """This node's processes carrying the attempt's marker (the job where it runs here, as
    on a single-node cluster; none where it runs on a compute node we cannot see)."""
    procs = procs if procs is not None else scan()
    prot = protected(procs)
    return sorted(pid for pid, hid in procs.markers().get(store.name, ())
                  if pid not in prot and (hid is None or hid == att.get("home_id")) and not procs[pid].dead)


# --- stop

def stop(req, home):
    store = RunStore.existing(home, req.get("name"))
    fd = store.lock("stop", req.get("lock_timeout"))
    try:
        att = store.latest()
        sig, grace = engine.stop_terms(req, att)
        ckpt = None
        if req.get("checkpoint") is not None:  # through scancel to the job's program (slurmckpt.py)
            from . import slurmckpt
            ckpt = slurmckpt.before_stop(store, att, req["checkpoint"])
        res = _stop_job(store, att, sig, grace)
        if ckpt is not None:
            res["checkpoint"] = ckpt
        return res
    finally:
        store.unlock(fd)


def _stop_job(store, att, sig, grace):
    """scancel --signal=SIG --full (the batch script and every step), grace, then scancel;
    verified when Slurm lists the job with a final state (or no longer at all) and no
    process with the attempt's marker is left on this node."""
    job_id = att["slurm"]["job_id"]
    sig = signal_name(parse_signal(sig))
    res = {"name": store.name, "attempt": att.get("attempt"), "job_id": job_id, "signal": sig,
           "grace_s": grace, "slurm": att["slurm"], "escalated": False}
    t0 = time.monotonic()
    ended = (att.get("exit") or {}).get("state")
    before = requeued(store, att)
    if before is None and not ended:  # a recorded end not requeued (same_job) stays: the id may be another's now
        before = slurm.queued(job_id)
    if before is None or before["state"] not in slurm.ACTIVE:
        final = dict(att["exit"]) if ended and att.get("exit") else slurm.job_state(job_id)
        res["already_stopped"] = True
    else:
        res["already_stopped"] = False
        sent = []
        try:
            final = _cancel(job_id, before, sig, grace, res, sent)
        except AgentFailure as e:
            if e.type == "Unreachable" and sent:  # after a scancel: the job may be ending, unseen
                e.message += "; %s had been sent: whether the job ended is unknown" % ", then ".join(sent)
                e.hint = "`runward stop %s` again once Slurm answers verifies its end" % store.name
            raise
    if final is None:
        res.update({"verified_dead": False, "survivors": [], "state": "running",
                    "stop_s": round(time.monotonic() - t0, 3)})
        raise AgentFailure("NotVerified", "%s: Slurm job %s is still listed as active after scancel" % (
            store.name, job_id), "`squeue -j %s` on the login node says why" % job_id, result=res)
    record_end(store, att, final)
    res.update(_node_check(store, att, sig))
    res.update({"slurm_state": final["state"], "exit": att.get("exit"), "source": final.get("source"),
                "state": slurm.STATES.get(final["state"], "lost"), "stop_s": round(time.monotonic() - t0, 3)})
    res["verified"] = ["job_left_queue"] + (["no_process_of_run_alive"] if res["verified_dead"] else [])
    return res


def _cancel(job_id, before, sig, grace, res, sent):
    """scancel the active job and wait for its end: its final state, or None if it is still
    active after the grace and Slurm's KillWait. sent: the scancel commands sent so far."""
    if before["state"] in ("PENDING", "CONFIGURING") or slurm.STATES.get(before["state"]) == "pending":
        slurm.cancel(job_id)  # nothing runs yet: no signal to deliver (scancel refuses one)
        sent.append("scancel")
        return slurm.wait_gone(job_id, KILL_WAIT_S)
    slurm.cancel(job_id, sig)
    sent.append("scancel --signal=" + sig)
    final = slurm.wait_gone(job_id, grace)
    if final is None:
        res["escalated"] = True
        slurm.cancel(job_id)
        sent.append("scancel")
        final = slurm.wait_gone(job_id, KILL_WAIT_S)
    return final


def _node_check(store, att, sig):
    """After Slurm's end, the job's processes must leave this node (slurmd kills them; it may
    take a moment). Any that stay past NODE_WAIT_S escaped Slurm's tracking (a double fork
    under proctrack/linuxproc): runward ends them (the stop signal, then KILL) and says so."""
    deadline = time.monotonic() + NODE_WAIT_S
    while True:
        procs = scan()
        pids = _node_pids(store, att, procs)
        if not pids:
            return {"verified_dead": True, "processes": [], "survivors": []}
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    fates = terminate({p: procs[p] for p in pids}, procs, parse_signal(sig), ESCAPED_GRACE_S)
    survivors = [f for f in fates if f["fate"] == "survived"]
    return {"verified_dead": not survivors, "processes": fates, "survivors": survivors,
            "escaped_slurm": pids}


# --- status (state.status_of hands a submitted attempt here)

def status_of(store, att, with_details=True):
    out = {"name": store.name, "attempt": att.get("attempt"), "argv": att.get("argv"), "cwd": att.get("cwd"),
           "started_at": att.get("started_at"), "log": log_info(att.get("log")), "slurm": att["slurm"],
           "job_id": att["slurm"]["job_id"]}
    try:
        st = requeued(store, att)
    except AgentFailure as e:  # the recorded end is all there is to say, and said as such
        st = None
        out["note"] = ("Slurm could not be asked now (%s): the end shown is the one recorded; a requeue "
                       "since would not show" % e.message)
    ex = att.get("exit") or {}
    st = st or (None if ex.get("state") else slurm.job_state(att["slurm"]["job_id"]))
    if att.get("requeued"):
        out["requeued"] = att["requeued"]
    if st is not None:
        record_end(store, att, st)
        ex = att.get("exit") or {}
    if ex.get("state"):
        out.update({"state": slurm.STATES.get(ex["state"], "lost"), "slurm_state": ex["state"], "exit": ex,
                    "source": ex.get("source")})
    elif st is None:
        out.update({"state": "lost", "slurm_state": None, "source": "none",
                    "note": "Slurm no longer knows job %s (no accounting, and it ended more than MinJobAge "
                            "ago)" % att["slurm"]["job_id"]})
    else:
        out.update({"state": slurm.STATES.get(st["state"], st["state"].lower()), "slurm_state": st["state"],
                    "reason": st.get("reason"), "nodes": st.get("nodes"), "source": st.get("source")})
        if out["state"] == "running":
            out["node_pids"] = _node_pids(store, att)
    return out
