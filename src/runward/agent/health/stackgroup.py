"""Grouping of stack captures by frame and rank, and their one-line summary: pure functions
over agent/health/stacks.py's documents, shared by the agent (one node) and the CLI (the nodes of a
multi-node run merged), so both say it the same way. Stdlib only, no I/O."""

# Frames that are where a thread waits, not what it is doing: the summary names the first
# frame outside them (a rank in queue.get is "in" the caller that asked for the item).
PLUMBING = ("threading.py", "selectors.py", "queue.py", "subprocess.py", "socket.py",
            "multiprocessing/connection.py", "multiprocessing/synchronize.py")


def meaningful(frames):
    """The innermost Python frame (frames are innermost first) that is not a waiting place.
    Native frames (--native) are skipped: two ranks both waiting in libc's futex are not in
    the same place; the Python frame that called into C says where each is."""
    for f in frames:
        if not f.get("native") and not any((f.get("file") or "").endswith(s) for s in PLUMBING):
            return f
    py = [f for f in frames if not f.get("native")]
    return (py or frames)[0] if frames else None


def native_above(frames):
    """The innermost native frame, where a rank stuck in C/C++ is (--native), or None."""
    return next((f for f in frames if f.get("native")), None)


def _where(f):
    return "%s (%s:%s)" % (f.get("name"), f.get("file"), f.get("line")) if f else "?"


def group(procs):
    """[{where, ranks, others, pids}] per distinct meaningful frame, ranked processes first."""
    out = {}
    for p in procs:
        if "frame" not in p:
            continue
        g = out.setdefault(_where(p["frame"]), {"where": _where(p["frame"]), "ranks": [], "others": [], "pids": []})
        g["pids"].append(p["pid"])
        if p.get("rank") is not None:
            g["ranks"].append(p["rank"])
        else:
            g["others"].append(p.get("comm"))
    gs = sorted(out.values(), key=lambda g: (not g["ranks"], sorted(g["ranks"])[:1], g["where"]))
    for g in gs:
        g["ranks"].sort()
    return gs


def summary(doc):
    """One line: "ranks 0,1 in all_reduce (...); rank 2 in slow_step (train.py:40); ..."."""
    if not doc.get("ok") and doc.get("error"):
        return "stacks not read: %s (%s)" % (doc["error"], doc.get("hint"))
    parts = []
    for g in doc.get("groups") or ():
        who = []
        if g["ranks"]:
            who.append("rank%s %s" % ("s" if len(g["ranks"]) > 1 else "", ",".join(map(str, g["ranks"]))))
        if g["others"]:
            n = len(g["others"])
            who.append("%d other process%s (%s)" % (n, "es" if n > 1 else "", ",".join(sorted(set(g["others"])))))
        parts.append("%s in %s" % (" and ".join(who), g["where"]))
    bad = [p for p in doc.get("procs") or () if "error" in p]
    if bad:
        kinds = sorted(set(p["error"] for p in bad))
        parts.append("%d not read (%s)" % (len(bad), ", ".join(kinds)))
    return "; ".join(parts)
