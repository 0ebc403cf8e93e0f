"""cgroups: the one container a double-forking child that clears its environment cannot
leave. A run gets runward/<home id>-<name>.<attempt> in each writable hierarchy."""

import os

from ..core.procfs import read_text


def roots():
    """Writable cgroup hierarchies: v2 (unified) if we can create under it, else v1 pids/memory."""
    out = []
    cands = []
    if os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):
        cands.append(("v2", "/sys/fs/cgroup"))
    else:
        for c in ("pids", "memory", "unified"):
            p = "/sys/fs/cgroup/" + c
            if os.path.isfile(os.path.join(p, "cgroup.procs")):
                cands.append(("v2" if c == "unified" else "v1", p))
    for kind, p in cands:
        if os.access(p, os.W_OK):
            out.append((kind, p))
    return out


def create(name, attempt, home_id=""):
    """Try to make runward/<home id>-<name>.<attempt> in each writable hierarchy; return the
    paths made."""
    made = []
    leaf = "%s-%s.%d" % (home_id, name, attempt) if home_id else "%s.%d" % (name, attempt)
    for kind, root in roots():
        base = os.path.join(root, "runward")
        try:
            os.makedirs(os.path.join(base, leaf), exist_ok=True)
            made.append(os.path.join(base, leaf))
        except OSError:
            continue
    return made


def pids(paths):
    """Every process in PATHS and in the cgroups below them: a job (as root) may make one of
    its own under the run's and move there, and cgroup.procs lists a cgroup's own members only."""
    out = set()
    for top in paths or ():
        for p, _, _ in os.walk(top):
            txt = read_text(os.path.join(p, "cgroup.procs"), "") or ""
            out.update(int(x) for x in txt.split() if x.isdigit())
    return out


def frozen(paths):
    """The cgroup v2 cgroups among PATHS and below them that are frozen (cgroup.events says
    frozen 1: cgroup.freeze here or in a parent, as `systemctl freeze` or a container runtime's
    pause writes it) or asked to be (cgroup.freeze 1, a member not yet stopped). Their
    processes read S in /proc, not T, yet run nothing: not a caught signal's handler either."""
    out = []
    for top in paths or ():
        for p, _, _ in os.walk(top):
            events = (read_text(os.path.join(p, "cgroup.events"), "") or "").splitlines()
            if "frozen 1" in events or (read_text(os.path.join(p, "cgroup.freeze"), "") or "").strip() == "1":
                out.append(p)
    return out


def thaw(paths):
    """Write 0 to cgroup.freeze of each of PATHS (the run's own cgroups) frozen there; the
    paths thawed. One frozen by a parent's freeze is not ours to thaw, and stays frozen."""
    done = []
    for p in frozen(paths):
        f = os.path.join(p, "cgroup.freeze")
        if (read_text(f, "") or "").strip() != "1":
            continue
        try:
            with open(f, "w") as fh:
                fh.write("0")
            done.append(p)
        except OSError:
            pass
    return done


def run_paths(paths):
    """PATHS (one attempt's cgroups) and their siblings of the same run's other attempts
    (<home id>-<name>.<N>): a supervised restart's attempt has a cgroup of its own, and what
    an earlier attempt left in its cgroup (the shim removes an attempt's cgroup when it is
    empty, so only those remain) is still the run's, also once the shim is gone."""
    out = []
    for p in paths or ():
        base, leaf = os.path.split(p.rstrip("/"))
        stem = leaf.rsplit(".", 1)[0] + "."
        try:
            names = os.listdir(base)
        except OSError:
            names = [leaf]
        out.extend(os.path.join(base, n) for n in names if n.startswith(stem) and n[len(stem):].isdigit())
    return out


def remove(paths):
    """rmdir each of PATHS, the empty cgroups below it first (a cgroup with a child cannot
    go); one that still holds a process stays (the kernel refuses), and so do its parents."""
    for top in paths or ():
        for p, _, _ in os.walk(top, topdown=False):
            try:
                os.rmdir(p)
            except OSError:
                pass
