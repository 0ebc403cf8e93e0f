"""Progress of a supervised run (docs/supervision.md, "Progress"): the furthest step each
attempt reached (from the log, by the parser status and watch use) and the newest *complete*
checkpoint on the target, so that a restart resumes from it ({last_checkpoint}) and a run
that restarts without gaining anything gives up (max_no_progress) instead of burning its
restarts.

A checkpoint is a directory (or file) matching the `checkpoint` glob, taken from the run's
cwd. It is complete when it holds the `checkpoint_marker` file, or when a log line matching
the `checkpoint_saved` regex names it; one still being written has neither, and never
counts, however new. Newest: the highest number in its name (step_900 after step_85), then
the newest mtime. Only a policy with `checkpoint` or `max_no_progress` is tracked, so
every other run's restart pays nothing for it (bench/supervise.py)."""

import os
import time

from ..core.wire import bad_input

PLACEHOLDER = "{last_checkpoint}"
KEYS = ("checkpoint", "checkpoint_marker", "checkpoint_saved", "max_no_progress", "resume_default")
HISTORY = 50  # attempts whose progress the record keeps (status shows them)


def check(pol):
    """The progress keys of a start's policy, checked before anything is written."""
    ck = pol.get("checkpoint")
    if ck is not None and (not isinstance(ck, str) or not ck.strip()):
        raise bad_input("invalid checkpoint %r" % (ck,), "checkpoint = \"ckpt/step_*\": a glob from the run's cwd")
    marker, saved = pol.get("checkpoint_marker"), pol.get("checkpoint_saved")
    if marker is not None and (not isinstance(marker, str) or not marker or "/" in marker or marker in (".", "..")):
        raise bad_input("invalid checkpoint_marker %r" % (marker,),
                        "a file name inside the checkpoint directory, e.g. checkpoint_marker = \"COMPLETE\"")
    if saved is not None:
        import re
        try:
            re.compile(saved)
        except (re.error, TypeError) as e:
            raise bad_input("invalid checkpoint_saved regex %r: %s" % (saved, e),
                            "a Python regex; its group `path` (or group 1) names the checkpoint")
    if ck and marker is None and saved is None:
        raise bad_input("checkpoint %r has no way to tell a complete checkpoint from one being written" % ck,
                        "add checkpoint_marker = \"COMPLETE\" (a file the job writes last) or "
                        "checkpoint_saved = \"saved checkpoint (?P<path>\\S+)\"")
    if (marker is not None or saved is not None) and not ck:
        raise bad_input("checkpoint_marker/checkpoint_saved without checkpoint",
                        "add checkpoint = \"ckpt/step_*\" (a glob from the run's cwd)")
    n = pol.get("max_no_progress")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise bad_input("invalid max_no_progress %r" % (n,), "give a whole number >= 1 (attempts in a row)")
    rd = pol.get("resume_default")
    if rd is not None and (not isinstance(rd, str) or "\0" in rd):
        raise bad_input("invalid resume_default %r" % (rd,), "a path, e.g. --resume-default base/init")


def tracked(pol):
    return bool(pol and (pol.get("checkpoint") or pol.get("max_no_progress")))


def uses_placeholder(argv, sh, env):
    return any(PLACEHOLDER in a for a in ([sh] if sh is not None else argv or [])) or \
        any(PLACEHOLDER in str(v) for v in (env or {}).values())


def sh_quote(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def furthest_step(store, att):
    """The furthest step the attempt's part of the log shows (health/facts.py's scan, which
    status and watch share: one incremental read), or None."""
    from ..health import facts as health
    try:
        saved = health.scan(store, att)[0]
    except (OSError, ValueError):
        return None
    return saved.get("max_step")


class Tracker(object):
    """Kept by the shim (supervise.Supervisor) for a tracked policy."""

    def __init__(self, store, pol, att, env):
        self.store, self.pol = store, pol
        self.cwd = att.get("cwd") or "/"
        self.env_templates = dict((k, v) for k, v in env.items() if PLACEHOLDER in str(v))
        self.saved = set()  # what checkpoint_saved lines named
        self.log_at = None  # (ino, dev, offset) read so far, for those lines
        self.start_ck = None  # the newest complete checkpoint when this attempt began
        # carried from the attempt before: a restart's record has it, a `restart` verb's reads it
        prev = att.get("progress") or (store.attempt(int(att.get("attempt") or 1) - 1) or {}).get("progress") or {}
        self.history = list(prev.get("attempts") or [])
        self.best = prev.get("best_step")
        self.streak = 0  # attempts in a row without progress, under this shim

    def latest(self):
        """The newest complete checkpoint's absolute path, or None."""
        import glob
        pat = self.pol.get("checkpoint")
        if not pat:
            return None
        if self.pol.get("checkpoint_saved"):
            self._read_saved()
        found = glob.glob(os.path.join(self.cwd, os.path.expanduser(pat)))
        for path in sorted(found, key=_newest_key, reverse=True):
            if self._complete(path):
                return os.path.normpath(path)
        return None

    def _complete(self, path):
        marker = self.pol.get("checkpoint_marker")
        if marker and os.path.isdir(path) and os.path.isfile(os.path.join(path, marker)):
            return True
        base = os.path.basename(os.path.normpath(path))
        return any(s == path or os.path.normpath(os.path.join(self.cwd, s)) == os.path.normpath(path)
                   or os.path.basename(os.path.normpath(s)) == base for s in self.saved)

    def _read_saved(self):
        """The log's new lines since the last read; what the regex names is a saved checkpoint."""
        import re
        rx = re.compile(self.pol["checkpoint_saved"])
        log = (self.store.latest() or {}).get("log")
        try:
            fd = os.open(log, os.O_RDONLY)
        except (OSError, TypeError):
            return
        try:
            st = os.fstat(fd)
            at = self.log_at
            off = at[2] if at and at[:2] == (st.st_ino, st.st_dev) and at[2] <= st.st_size else 0
            os.lseek(fd, off, 0)
            data = b""
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        done = data.rfind(b"\n") + 1  # a line still being written is read next time
        self.log_at = (st.st_ino, st.st_dev, off + done)
        for line in data[:done].decode("utf-8", "replace").splitlines():
            m = rx.search(line)
            if m:
                g = m.groupdict().get("path") or (m.group(1) if m.re.groups else m.group(0))
                if g:
                    self.saved.add(g.strip())

    def resolve(self, att, env):
        """Before an attempt's job runs: {last_checkpoint} in its argv and env (the newest
        complete checkpoint, else resume_default, else empty); ATT and ENV changed in place."""
        self.start_ck = self.latest()
        value = self.start_ck or self.pol.get("resume_default") or ""
        att["resume_from"] = value or None
        tpl = att.get("argv_template") or att["argv"]
        if any(PLACEHOLDER in a for a in tpl):
            att["argv_template"] = list(tpl)
            shown = sh_quote(value) if att.get("sh") is not None else value
            att["argv"] = [a.replace(PLACEHOLDER, shown) for a in tpl]
        for k, v in self.env_templates.items():
            env[k] = v.replace(PLACEHOLDER, value)

    def changed(self, att, env):
        """What a job forked in advance (the zygote) must be told besides its marker."""
        if not (att.get("argv_template") or self.env_templates):
            return None
        return {"argv": att["argv"], "env": dict((k, env[k]) for k in self.env_templates)}

    def ended(self, att):
        """Attempt ATT's progress, judged against the attempts before it: the record's
        `progress` (this attempt added to the history), and whether it made any."""
        step = furthest_step(self.store, att)
        ck = self.latest() if self.pol.get("checkpoint") else None
        gained = step is not None and (self.best is None or step > self.best)
        new_ck = ck is not None and ck != self.start_ck
        progressed = gained or new_ck
        self.streak = 0 if progressed else self.streak + 1
        if gained:
            self.best = step
        self.history = (self.history + [{"attempt": att.get("attempt"), "step": step, "checkpoint": ck,
                                         "resumed_from": att.get("resume_from"), "progressed": progressed,
                                         "at": time.time()}])[-HISTORY:]
        return self.summary(ck)

    def summary(self, ck=None):
        last = ck or next((h["checkpoint"] for h in reversed(self.history) if h.get("checkpoint")), None)
        return {"best_step": self.best, "last_checkpoint": last, "no_progress": self.streak,
                "max_no_progress": self.pol.get("max_no_progress"), "attempts": self.history}

    def stuck(self):
        n = self.pol.get("max_no_progress")
        return bool(n) and self.streak >= n


def _newest_key(path):
    """(the last number in the name, mtime): step_900 sorts after step_85."""
    base = os.path.basename(os.path.normpath(path))
    digits, num = "", -1
    for ch in reversed(base):
        if ch.isdigit():
            digits = ch + digits
        elif digits:
            break
    if digits:
        num = int(digits)
    try:
        mt = os.stat(path).st_mtime
    except OSError:
        mt = 0.0
    return (num, mt)
