"""Slurm's client commands on this host (a login node): submit, ask a job's state, cancel.

Each function runs one Slurm command with a timeout and returns what it said; a command that
is missing or refuses is an AgentFailure carrying Slurm's own message (docs/slurm.md). The
state of a job comes from squeue while the controller lists it (with the reason a pending job
waits, `squeue -o %r`), then from sacct where accounting is there, else from `scontrol show
job`, which keeps a finished job for MinJobAge (300 s by default); each answer names its
source."""

import os
import subprocess
import time

from .minimal import which
from .wire import AgentFailure, bad_input

CMD_TIMEOUT = 30.0
# the attempt entry's keys the target gave it (its engine_spec): restart compares them with the target's now
TARGET_KEYS = ("partition", "options")
# Slurm's job states (squeue(1), "JOB STATE CODES") -> runward's states. "pending" is the
# one runward state only a scheduler has. A job that ended by a scancel is "stopped".
STATES = {
    "PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending", "RESV_DEL_HOLD": "pending",
    "RUNNING": "running", "COMPLETING": "running", "SIGNALING": "running", "STAGE_OUT": "running",
    "RESIZING": "running", "SUSPENDED": "suspended", "STOPPED": "suspended",
    "COMPLETED": "exited", "FAILED": "exited", "OUT_OF_MEMORY": "exited",
    "CANCELLED": "stopped", "TIMEOUT": "failed", "NODE_FAIL": "failed", "PREEMPTED": "failed",
    "BOOT_FAIL": "failed", "DEADLINE": "failed", "REVOKED": "failed", "SPECIAL_EXIT": "failed",
}
ACTIVE = frozenset(k for k, v in STATES.items() if v in ("pending", "running", "suspended"))
# what Slurm's client commands say when slurmctld does not answer (slurm_load_jobs error:
# Unable to contact slurm controller (connect failure); one that takes the connection and
# says nothing within MessageTimeout: Socket timed out on send/recv operation): the job's
# state is then unknown
NO_CONTROLLER = ("Unable to contact slurm controller", "Connection refused", "Socket timed out")


def command(name):
    """The path of Slurm's command NAME here, or a BadInput that says Slurm is not here."""
    path = which(name)
    if path is None:
        raise bad_input("no Slurm on this host: %s not found on PATH (%s)" % (name, os.environ.get("PATH", "")),
                        "target the cluster's login node (slurm://LOGIN/PARTITION), where Slurm's client "
                        "commands are installed")
    return path


def run(argv, env=None, timeout=CMD_TIMEOUT):
    """(exit status, stdout, stderr) of a Slurm command; a controller that does not answer
    within timeout is an error, never a hang."""
    argv = [command(argv[0])] + list(argv[1:])
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=env, timeout=timeout)
    except subprocess.TimeoutExpired:  # what it would have said (a state, a submission) is unknown
        raise AgentFailure("Unreachable", "%s did not answer within %gs" % (os.path.basename(argv[0]), timeout),
                           "is slurmctld up? `scontrol ping` on this host says")
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace").strip()


def failure(what, rc, err):
    """A Slurm command that could not say a job's state, as an error: Unreachable (exit 3,
    docs/slurm.md), with Slurm's own words. Whatever made it fail (no controller, one that
    does not answer, ...), the job's state is unknown, never "no such job" nor a verdict."""
    msg = err or "exit status %d" % rc
    if any(s in msg for s in NO_CONTROLLER):
        return AgentFailure("Unreachable", "%s could not reach the Slurm controller: %s" % (what, msg),
                            "check slurmctld (`scontrol ping`) and slurm.conf on this host")
    return AgentFailure("Unreachable", "%s could not say the job's state: %s" % (what, msg),
                        "run it on this host to see why; `scontrol ping` says whether slurmctld answers")


def submit(argv, env):
    """sbatch --parsable ...: the job id. A refusal is bad input with sbatch's own words
    (`sbatch: error: ...`), as is a controller that cannot be reached."""
    rc, out, err = run(["sbatch", "--parsable"] + list(argv), env=env)
    if rc != 0:
        msg = err or out.strip() or "exit status %d" % rc
        if any(s in msg for s in NO_CONTROLLER):
            raise failure("sbatch", rc, msg)
        raise bad_input("sbatch refused the job: %s" % msg,
                        "fix the target's sbatch options (partition, account, time, gpus, nodes, extra)")
    first = out.strip().splitlines()[-1] if out.strip() else ""
    job_id = first.split(";")[0]  # --parsable prints jobid[;cluster]
    if not job_id.isdigit():
        raise AgentFailure("Failed", "sbatch printed no job id: %r" % out[:200])
    return job_id


def queued(job_id):
    """{"state", "reason", "nodes", "uid", "command"} of a job the controller lists (squeue),
    or None. command (a batch job's script path) is last: a path may hold "|"."""
    rc, out, err = run(["squeue", "-h", "-j", str(job_id), "-o", "%T|%r|%N|%U|%o"])
    if rc != 0 and "Invalid job id" not in err:
        raise failure("squeue", rc, err)
    for line in out.splitlines():
        parts = line.strip().split("|", 4)
        if len(parts) == 5 and parts[0]:
            return {"state": parts[0], "reason": parts[1], "nodes": parts[2], "uid": parts[3],
                    "command": parts[4], "source": "squeue"}
    return None


def same_job(q, att):
    """Whether Q, squeue's job under the attempt's recorded id, is the attempt's job: ours
    (this uid) and running the attempt's own batch script (attempts/N.sbatch, one path per
    attempt, kept by a requeue). A job id is not forever: a controller that starts again
    without its saved state numbers jobs from FirstJobId again, and squeue then lists
    another job, maybe another user's, under an id we recorded."""
    script = (att.get("slurm") or {}).get("script")
    return q.get("uid") == str(os.getuid()) and (not script or q.get("command") == script)


def parse_exit(text):
    """Slurm's ExitCode `code:signal` as runward's exit fact ({"code"} or {"signal"})."""
    code, _, sig = (text or "").partition(":")
    out = {"exit_code": text}
    if sig.isdigit() and int(sig):
        out["signal"] = _signame(int(sig))
    elif code.isdigit():
        out["code"] = int(code)
    return out


def _signame(n):
    import signal
    try:
        return signal.Signals(n).name[3:]
    except ValueError:
        return str(n)


def from_sacct(job_id):
    """The job's final record from accounting, or None where there is no accounting (sacct
    says so: `Slurm accounting storage is disabled`) or it does not know the job yet."""
    if which("sacct") is None:
        return None
    rc, out, err = run(["sacct", "-n", "-P", "-X", "-j", str(job_id), "-o", "State,ExitCode,Reason,NodeList,Start,End"])
    if rc != 0:
        return None
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) >= 2 and parts[0]:
            st = parts[0].split()[0]  # "CANCELLED by 0"
            return dict(parse_exit(parts[1]), state=st, reason=parts[2] if len(parts) > 2 else "",
                        nodes=parts[3] if len(parts) > 3 else "", source="sacct",
                        start=parts[4] if len(parts) > 4 else None, end=parts[5] if len(parts) > 5 else None)
    return None


def from_scontrol(job_id):
    """The job as `scontrol show job -o` keeps it (until MinJobAge after its end), or None."""
    rc, out, err = run(["scontrol", "show", "job", "-o", str(job_id)])
    if rc != 0:
        if "Invalid job id" in err or "Invalid job id" in out:
            return None
        raise failure("scontrol show job %s" % job_id, rc, err)
    fields = {}
    for word in out.split():
        k, sep, v = word.partition("=")
        if sep and k not in fields:
            fields[k] = v
    if not fields.get("JobState"):
        return None
    return dict(parse_exit(fields.get("ExitCode")), state=fields["JobState"], reason=fields.get("Reason", ""),
                nodes=fields.get("NodeList", ""), source="scontrol", start=fields.get("StartTime"),
                end=fields.get("EndTime"))  # Slurm's own times (its local time, as it prints them)


def job_state(job_id):
    """What Slurm says of the job now: squeue while it is listed as active, else sacct,
    else scontrol; None when no source knows it (it ended longer than MinJobAge ago and
    there is no accounting)."""
    q = queued(job_id)
    if q is not None and q["state"] in ACTIVE and q["state"] != "COMPLETING":
        return q
    final = from_sacct(job_id)
    if final is None or final["state"] in ACTIVE:
        final = from_scontrol(job_id) or final
    if final is None and q is not None:
        return q
    if final is not None and q is not None and final["state"] in ACTIVE:
        final["reason"] = q["reason"]
    return final


def cancel(job_id, signal_name=None):
    """scancel: with a signal, to the whole job (--full: the batch script and every step);
    without, the job is cancelled (KILL after Slurm's KillWait)."""
    argv = ["scancel"] + (["--signal=" + signal_name, "--full"] if signal_name else []) + [str(job_id)]
    rc, out, err = run(argv)
    if rc != 0 and any(s in err for s in NO_CONTROLLER):  # nothing was sent
        raise failure("scancel", rc, err)
    if rc != 0 and "already completing or completed" not in err and "Invalid job id" not in err:
        raise AgentFailure("Failed", "scancel refused: %s" % (err or "exit %d" % rc))
    return err


def wait_gone(job_id, timeout, poll=0.1):
    """Poll until the job is no longer active (it left the queue, or is listed with a final
    state); returns its state then, or None at the deadline (still active)."""
    deadline = time.monotonic() + timeout
    while True:
        q = queued(job_id)
        if q is None or q["state"] not in ACTIVE:
            return job_state(job_id) or {"state": "UNKNOWN", "source": "none"}
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll)  # no event to wait on: Slurm's commands are polled (squeue)


def alive(att):
    """Whether the attempt's job is active in Slurm (health's and watch's `alive`)."""
    try:
        return active(att)
    except AgentFailure:
        return False


def active(att):
    """Whether the attempt's job is active in Slurm, for a verb that destroys on the answer
    (rm, prune): a squeue that cannot answer raises (Unreachable when the controller does
    not answer), since a job Slurm cannot be asked about may well be running. Asked also
    after an end was recorded: `scontrol requeue` brings the same job id back (and only
    the attempt's own job counts: same_job)."""
    q = queued(att["slurm"]["job_id"])
    return q is not None and q["state"] in ACTIVE and (not (att.get("exit") or {}).get("state") or same_job(q, att))


def live(store, att):
    """What lives of the attempt for prune's refusal, None when Slurm lists its job as no
    longer active. A Slurm that cannot be asked is no answer (design rule 11): an error
    naming Slurm, so that nothing is removed on it."""
    try:
        if not active(att):
            return None
    except AgentFailure as e:
        raise AgentFailure(e.type, "run %s: the state of its Slurm job %s is unknown, so it is not removed: %s" % (
            store.name, att["slurm"]["job_id"], e.message), e.hint, slurm_job=att["slurm"]["job_id"])
    return {"state": "active in Slurm (job %s)" % att["slurm"]["job_id"], "attempt": att.get("attempt"),
            "pid": None, "pids": []}


def history_row(att):
    """history's entry for a Slurm attempt: its job, and its end as Slurm recorded it."""
    sl, ex = att["slurm"], att.get("exit") or {}
    return {"job_id": sl.get("job_id"), "partition": sl.get("partition"),
            "state": ex.get("state"), "exit_code": ex.get("exit_code"),  # Slurm's "0:0"
            "start": ex.get("start"), "end": ex.get("end")}  # Slurm's StartTime/EndTime
