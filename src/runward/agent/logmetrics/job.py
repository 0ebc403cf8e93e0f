"""Alerts about the job rather than its log lines: a log that stopped growing while the job
is alive, and the job's end (an exit code, a signal, SIGKILL as the OOM killer's mark)."""

from .alerts import alert


def stall_alert(now, growth_t, stall):
    """The stall alert when the log has not grown for more than STALL seconds, else None.
    Said again on every call while it lasts."""
    if growth_t is None or now - growth_t <= stall:
        return None
    quiet = now - growth_t
    return alert("stall", now, "no new log output for %d s (stall limit %g s) while the job "
                 "is alive" % (quiet, stall), value=round(quiet, 1), since=growth_t)


class ExitWatch(object):
    """The job's end, reported once per occurrence across calls."""

    def __init__(self, state):
        self.exit_seen = state.get("exit_seen")
        self.sigkill_seen = state.get("sigkill_seen", False)

    def alerts(self, exit_info, now):
        """Alerts for EXIT_INFO ({"code", "signal"}) not reported yet."""
        out = []
        code, sig = exit_info.get("code"), exit_info.get("signal")
        seen = [code, sig]
        # the job's end is dated by its exit record, not by the read that noticed it
        at = exit_info.get("at") or now
        if self.exit_seen != seen:
            self.exit_seen = seen
            if sig:
                detail = "the job was killed by %s" % sig
            elif code is None:
                detail = "the job ended; its exit status is unknown (%s)" % (
                    exit_info.get("note") or "nobody saw it end")
            else:
                detail = "the job exited with code %s" % code
            out.append(alert("exited", at, detail, code=code, signal=sig))
        sigkill = (str(sig or "").upper().replace("SIG", "") in ("KILL", "9")
                   or code in (137, -9))
        if sigkill and not self.sigkill_seen and not exit_info.get("stopped"):
            self.sigkill_seen = True
            out.append(alert(
                "oom_killed", at, "possibly OOM-killed: the job ended by SIGKILL (the "
                "kernel OOM killer sends it; dmesg tells)", evidence="exit by SIGKILL",
                certain=False))
        return out
