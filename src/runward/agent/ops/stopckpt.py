"""stop --checkpoint (docs/supervision.md, "Checkpoint before stop"): before the stop, the
job gets the checkpoint signal (USR1 by default), and the stop waits until its log shows the
wait_for line, or until a newer complete checkpoint exists (the run's checkpoint glob,
supervise/progress.py), at most timeout seconds; then it stops as usual. Each step is said in the
stop's result ("checkpoint"). Imported only by a stop that asks for it: a plain stop imports
no regex."""

import os
import time

from ..core.procfs import live, read_proc
from ..proc.terminate import SIGNALS, parse_signal, signal_name
from ..core.wire import AgentFailure, bad_input, event

POLL_S = 0.1


def check(spec, att):
    """The request's checkpoint table, checked before anything is signalled."""
    if not isinstance(spec, dict):
        raise bad_input("invalid checkpoint %r" % (spec,), "stop_checkpoint = { signal = \"USR1\", wait_for = \"REGEX\" }")
    sig = parse_signal(spec.get("signal") or "USR1")
    timeout = spec.get("timeout", 600)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout < 0:
        raise bad_input("invalid checkpoint timeout %r" % (timeout,), "give seconds >= 0, e.g. timeout = 600")
    rx = None
    if spec.get("wait_for"):
        import re
        try:
            rx = re.compile(spec["wait_for"])
        except (re.error, TypeError) as e:
            raise bad_input("invalid checkpoint wait_for regex %r: %s" % (spec["wait_for"], e), "a Python regex")
    pol = (att or {}).get("supervise") or {}
    if rx is None and not pol.get("checkpoint"):
        raise bad_input("stop --checkpoint: nothing to wait for",
                        "give --checkpoint-wait-for REGEX (stop_checkpoint = { wait_for = ... }), or start the run "
                        "with --checkpoint GLOB and a completeness test")
    return sig, float(timeout), rx, pol


def before_stop(store, att, spec):
    """Signal the job, wait for its checkpoint; the step's account for the stop's result."""
    sig, timeout, rx, pol = check(spec, att)
    job = (att or {}).get("job")
    jp = live(job) if job else None
    out = {"signal": signal_name(sig), "timeout_s": timeout}
    if jp is None:
        out["skipped"] = "the job is not running: nothing to checkpoint"
        return out
    tracker = tracker_of(store, att, pol)
    before = tracker.latest() if tracker else None
    log, offset = att.get("log"), size(att.get("log"))
    try:
        os.kill(jp.pid, sig)  # its identity (pid and start time) was checked just above
    except ProcessLookupError:
        out["skipped"] = "the job ended before the signal"
        return out
    out["sent_to"] = jp.pid
    if _resume(jp.pid):
        out["resumed"] = "SIGCONT"
    event({"checkpoint_signal": {"pid": jp.pid, "signal": out["signal"]}})
    return wait_saved(out, rx, tracker, before, log, offset, lambda: live(job) is not None, timeout)


def _resume(pid):
    """SIGCONT after the checkpoint signal to a job paused (SIGSTOP, Ctrl-Z: state T), as
    the stop does (proc/terminate.py): a paused job takes its handler only once resumed."""
    q = read_proc(pid)
    if q is None or q.state != "T":
        return False
    try:
        os.kill(pid, SIGNALS["SIGCONT"])
    except ProcessLookupError:
        return False
    return True


def wait_saved(out, rx, tracker, before, log, offset, alive, timeout):
    """Until the log (from OFFSET) shows RX, or the tracker a checkpoint newer than BEFORE,
    or alive() says the job ended, or TIMEOUT: each said in OUT, which is returned."""
    t0 = time.monotonic()
    carry = b""
    while True:
        if rx is not None:
            line, offset, carry = _match(log, offset, carry, rx)
            if line is not None:
                out.update(saw_line=line, waited_s=round(time.monotonic() - t0, 3))
                return out
        now = tracker.latest() if tracker else None
        if now is not None and now != before:
            out.update(checkpoint=now, waited_s=round(time.monotonic() - t0, 3))
            return out
        if not alive():
            out.update(ended=True, waited_s=round(time.monotonic() - t0, 3),
                       note="the job ended before its checkpoint was seen")
            return out
        if time.monotonic() - t0 >= timeout:
            out.update(timed_out=True, waited_s=round(time.monotonic() - t0, 3),
                       note="no checkpoint seen within %gs: stopping as usual" % timeout)
            return out
        time.sleep(POLL_S)


def tracker_of(store, att, pol):
    if not pol.get("checkpoint"):
        return None
    from ..supervise.progress import Tracker
    return Tracker(store, pol, att, {})


def size(path):
    try:
        return os.stat(path).st_size
    except (OSError, TypeError):
        return 0


def _match(path, offset, carry, rx):
    """The first new line matching RX, or None; and where the next read begins."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(1 << 20)
    except (OSError, TypeError):
        raise AgentFailure("NotVerified", "cannot read the run's log %s to wait for its checkpoint" % path,
                           "check the log path; stop without --checkpoint")
    offset += len(data)
    lines = (carry + data).split(b"\n")
    for ln in lines[:-1]:
        text = ln.decode("utf-8", "replace")
        if rx.search(text):
            return text[:500], offset, b""
    return None, offset, lines[-1]

