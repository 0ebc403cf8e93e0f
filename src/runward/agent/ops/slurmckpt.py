"""stop --checkpoint of a Slurm job (docs/slurm.md, "stop --checkpoint"): the checkpoint
signal goes through scancel, to where the job's program runs, then the stop waits for the
line in the job's output (or a newer complete checkpoint), then stops as usual.

Which processes get it: the generated batch script execs the command (one node), so the
batch step *is* the program: `scancel --signal=SIG --batch` (the batch step alone, not its
children: the program's workers are not signalled, as with a local stop --checkpoint). With
srun (nodes > 1, or srun = true) the batch step is srun and each task is a step's: a plain
`scancel --signal=SIG` reaches the steps' tasks once each. --full would reach both, and srun
forwards USR1 to its tasks: a second signal, a second checkpoint."""

from ..core import slurm
from ..proc.terminate import signal_name
from ..core.wire import AgentFailure, event
from . import stopckpt


def before_stop(store, att, spec):
    sig, timeout, rx, pol = stopckpt.check(spec, att)
    job_id = att["slurm"]["job_id"]
    name = signal_name(sig)
    out = {"signal": name, "timeout_s": timeout, "job_id": job_id}
    q = slurm.queued(job_id)
    if q is None or q["state"] != "RUNNING":
        out["skipped"] = "the Slurm job is not running (%s): nothing to checkpoint" % (q or {}).get("state", "gone")
        return out
    opts = att["slurm"].get("options") or {}
    steps = int(opts.get("nodes") or 1) > 1 or bool(opts.get("srun"))
    argv = ["scancel", "--signal=" + name.replace("SIG", "", 1)] + ([] if steps else ["--batch"]) + [str(job_id)]
    tracker = stopckpt.tracker_of(store, att, pol)
    before = tracker.latest() if tracker else None
    log = att.get("log")
    offset = stopckpt.size(log)
    rc, _, err = slurm.run(argv)
    if rc != 0:
        raise AgentFailure("Failed", "scancel refused the checkpoint signal: %s" % (err or "exit %d" % rc),
                           "stop without --checkpoint")
    out["via"] = " ".join(argv)
    event({"checkpoint_signal": {"job_id": job_id, "signal": name, "via": out["via"]}})

    def alive():
        now = slurm.queued(job_id)
        return now is not None and now["state"] in slurm.ACTIVE
    return stopckpt.wait_saved(out, rx, tracker, before, log, offset, alive, timeout)
