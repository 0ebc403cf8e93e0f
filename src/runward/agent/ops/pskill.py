"""ps and kill: a safe pgrep/pkill. The search never shows or signals itself, its ancestors,
its own session's shells, other runward agents and shims, or the calling CLI: their command
lines carry the pattern (the `pkill -f` self-match)."""

import os

from ..core.boot import BOOTSTRAP_HEAD
from ..core.procfs import CLK_TCK, MARKER, boot_id, boot_time, descendants, owner_uid, protected, scan
from ..proc.terminate import parse_signal, signal_name, terminate
from ..core.wire import bad_input, event, outlive_caller

SHELLS = frozenset(("sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "busybox", "sshd", "su", "sudo", "runuser"))
POSIX_CLASSES = {"alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "space": r"\s", "upper": "A-Z",
                 "lower": "a-z", "punct": r"!-/:-@\[-`{-~", "xdigit": "0-9A-Fa-f"}


def caller_pids(req, procs):
    """The CLI and its ancestors when they live on this very machine (same boot id): the
    CLI's argv carries the pattern, and a pkill -f would find it."""
    c = req.get("caller") or {}
    if c.get("boot_id") != boot_id():
        return set()
    out = set()
    for ident in c.get("procs") or []:
        p = procs.get(ident.get("pid"))
        if p is not None and p.start == ident.get("start"):
            out.add(p.pid)
    return out


def exclusions(req, procs):
    """What ps/kill never show or signal: ourselves and our ancestors up to pid 1, every
    process of our own session (the shells and sshd that ran us), other runward agents and
    shims, kernel threads, and the calling CLI when it is on this machine."""
    prot = protected(procs).all()
    me = os.getsid(0)
    for p in procs.values():
        if p.sid == me and p.comm in SHELLS:
            prot.add(p.pid)  # a subshell of the command line that runs us carries its text too
        elif any(a.startswith(BOOTSTRAP_HEAD) for a in p.cmdline()):  # an agent, of any version
            prot.add(p.pid)
    return prot | caller_pids(req, procs)


def compile_pattern(pattern):
    import re  # only ps and kill need it: a status call never pays for it
    if not isinstance(pattern, str) or not pattern:
        raise bad_input("empty pattern", "give an extended regular expression, as for pgrep -f")
    # POSIX ERE as pgrep evaluates it; Python's re agrees on the common subset. Bracket
    # classes like [[:digit:]] are translated.
    py = re.sub(r"\[:(alpha|digit|alnum|space|upper|lower|punct|xdigit):\]",
                lambda m: POSIX_CLASSES[m.group(1)], pattern)
    try:
        return re.compile(py)
    except re.error as e:
        raise bad_input("invalid pattern %r: %s" % (pattern, e), "use an extended regular expression")


def user_name(uid, cache={}):
    if uid not in cache:
        try:
            import pwd
            cache[uid] = pwd.getpwuid(uid).pw_name
        except (KeyError, ImportError):
            cache[uid] = str(uid)
    return cache[uid]


def matching(req, procs):
    """({pid: Proc} whose command line matches the pattern, the excluded pids)."""
    rx = compile_pattern(req.get("pattern"))
    prot = exclusions(req, procs)
    found = {}
    for p in procs.values():
        if p.pid in prot or p.dead:
            continue
        cmd = p.cmdline()
        if not cmd:
            continue  # kernel threads and zombies have no command line
        if rx.search(" ".join(cmd)):
            found[p.pid] = p
    if req.get("tree"):
        for pid in descendants(list(found), procs):
            if pid not in prot and not procs[pid].dead:
                found[pid] = procs[pid]
    return found, prot


def describe(p, bt):
    uid = owner_uid(p.pid)
    return {"pid": p.pid, "start": p.start, "started_at": round(bt + p.start / float(CLK_TCK), 2),
            "user": user_name(uid) if uid is not None else "?", "run": p.env(MARKER),
            "cmd": " ".join(p.cmdline()), "state": p.state}


def ps(req, home):
    procs = scan()
    found, _ = matching(req, procs)
    bt = boot_time()
    return {"pattern": req.get("pattern"), "processes": [describe(found[pid], bt) for pid in sorted(found)]}


def kill(req, home):
    procs = scan()
    found, prot = matching(req, procs)
    limit = int(req.get("max") or 32)
    bt = boot_time()
    listing = [describe(found[pid], bt) for pid in sorted(found)]
    sig = parse_signal(req.get("signal") or "TERM")
    res = {"pattern": req.get("pattern"), "matched": listing, "signal": signal_name(sig)}
    if len(found) > limit:
        raise bad_input("pattern %r matches %d processes, more than --max %d" % (req.get("pattern"), len(found), limit),
                        "narrow the pattern, or raise --max if you mean it", result=res)
    if not req.get("yes"):
        res.update({"dry_run": True, "verified_dead": None})
        return res
    if not found:
        res.update({"dry_run": False, "processes": [], "verified_dead": True, "survivors": []})
        return res

    # from here the kill goes on to its end (KILL after the grace to what is left) whatever
    # happens to the CLI: interrupted mid-grace, it left a TERM-ignoring match alive for good
    outlive_caller()
    event({"kill_begun": {"pids": sorted(found)}})

    def find_more():
        ps_ = scan()
        more, _ = matching(req, ps_)
        # only descendants of what we matched may join later (a respawn under a supervisor)
        return {pid: q for pid, q in more.items() if pid in found or req.get("tree")}

    fates = terminate(found, procs, sig, float(req.get("grace", 10.0)), find_more=find_more)
    survivors = [f for f in fates if f["fate"] == "survived"]
    res.update({"dry_run": False, "processes": fates, "survivors": survivors, "verified_dead": not survivors})
    return res
