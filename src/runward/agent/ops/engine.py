"""What every engine's launcher (ops/NAME.py, core/launchers.py) does alike when it submits an
attempt: the next attempt's number, the log's header, and the records written once the engine
has taken the job; a refused submission leaves nothing behind."""

import os
import time

from ..core.boot import PROTOCOL
from ..core.procfs import boot_id
from ..core.runspec import GRACE_S, STOP_SIGNAL
from ..core.secrets import mask_url_passwords
from ..core.store import open_log, write_all, write_json
from ..core.wire import AgentFailure, event
from ..supervise import logfiles
from ..proc.terminate import signal_name
from .start import SPEC_KEYS, stored_env


def next_attempt(store):
    """(the run's record, the next attempt's number, fresh): the run's directories made;
    fresh: its directory is made by this call (a refused submission removes it)."""
    fresh = not os.path.isdir(store.dir)
    for d in (store.dir, os.path.join(store.dir, "attempts")):
        if not os.path.isdir(d):
            os.makedirs(d, 0o700)
    run = store.run() or {"name": store.name, "attempt": 0, "created": time.time()}
    return run, max([run.get("attempt", 0)] + store.attempts()) + 1, fresh


def submit(store, req, home, plan, run, n, fresh, marker, name, send, undo=None):
    """The log's header written, then send() (the engine's submission), which returns (the
    attempt record's NAME entry, the started event's own fields); then the records. A
    submission that raises leaves nothing: the log cut back to its size before the header,
    undo() (what the launcher wrote for it), and a run directory made now removed.
    Returns (n, the log's offset where the attempt's output begins)."""
    header = ("=== runward: %s attempt %d submitted %s: %s ===\n" % (
        store.name, n, time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        mask_url_passwords(plan["sh"] if plan["sh"] is not None else " ".join(plan["argv"])))).encode()
    lfd = open_log(plan["log"])
    size = os.fstat(lfd).st_size
    try:
        write_all(lfd, header, plan["log"])
        entry, said = send()
    except BaseException:
        os.ftruncate(lfd, size)  # only our header was written after size: the job never ran
        os.close(lfd)
        if undo is not None:
            undo()
        if fresh:
            from ..core.minimal import rmtree
            rmtree(store.dir)
        raise
    st = os.fstat(lfd)
    os.close(lfd)
    att = {"v": PROTOCOL, "run": store.name, "attempt": n, "argv": plan["argv"], "sh": plan["sh"],
           "cwd": plan["cwd"], "env": stored_env(req), "env_from": req["env_from"], "log": plan["log"],
           "marker": marker, "home_id": home.id, "boot_id": boot_id(), "created_at": time.time(),
           "started_at": None, "stop_signal": signal_name(plan["stop_sig"]), "grace": float(req.get("grace", GRACE_S)),
           "gpus": None, "settle": plan["settle"], "ready": plan["ready"], "log_offset": size + len(header),
           "log_file": [st.st_ino, st.st_dev], "cgroups": [], name: entry}
    write_json(store.attempt_path(n), att)
    run.update({"attempt": n, "spec": dict({k: req.get(k) for k in SPEC_KEYS}, env=stored_env(req))})
    write_json(os.path.join(store.dir, "run.json"), run)
    event({"started": dict({"attempt": n, "pid": None}, **said)})
    return n, size + len(header)


def stop_terms(req, att):
    """An engine job's stop: (its signal, its grace), the request's, else the attempt's own
    (what its start was given), else the defaults."""
    grace = req.get("grace") if req.get("grace") is not None else att.get("grace", GRACE_S)
    return req.get("signal") or att.get("stop_signal", STOP_SIGNAL), float(grace)


class ReadyWatch(object):
    """--ready on an engine's job: the first log line matching it, read as the log grows
    (read() at each poll), and the start's verdict on it (said())."""

    def __init__(self, plan, pos):
        self.re, self.pos, self.pending, self.line, self.log = plan["ready_re"], pos, b"", None, plan["log"]

    def read(self):
        if self.done():
            return
        data, self.pos = logfiles.read_on(self.log, self.pos)
        *lines, self.pending = (self.pending + data).split(b"\n")
        self.line = next((s for s in (x.decode("utf-8", "replace") for x in lines) if self.re.search(s)), None)

    def done(self):
        return self.re is None or self.line is not None

    def said(self, res, job, timeout):
        """The ready line in the start's result, or NotVerified (the job runs, silent) naming JOB."""
        if self.re is None:
            return
        res["ready"] = self.line is not None
        if self.line is None:
            raise AgentFailure("NotVerified", "%s (%s) runs but printed no line matching --ready within %ss" % (
                res["name"], job, timeout), "raise --ready-timeout or check the regex", result=res)
        res["ready_line"] = self.line
        res["verified"].append("ready_line")
