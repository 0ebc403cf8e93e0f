"""doctor: what works on this target and what does not."""

import os
import sys
import time

from ..proc import cgroups
from ..core import resident
from ..core.procfs import boot_id, in_container
from ..core.store import write_atomic
from ..core.wire import AgentFailure


def doctor(req, home):
    checks = {"python": sys.version.split()[0], "python_ok": sys.version_info >= (3, 8),
              "executable": sys.executable, "user": os.getuid(), "host": os.uname().nodename,
              "kernel": os.uname().release, "boot_id": boot_id(), "time": time.time(),
              "pidfd": hasattr(os, "pidfd_open")}
    checks["state_dir"] = _state_dir(home)
    checks["nvidia_smi"] = _nvidia_smi()
    checks["cgroups"] = _cgroups()
    checks["in_container"] = in_container()
    checks["resident"] = resident.state(home)
    checks["modules_missing"] = modules_missing()
    checks["pid1"] = pid1_reaps()
    return checks


# pid 1s that never wait() for the orphans the kernel hands them: a container started as
# `run IMAGE sleep infinity` without --init. Every shim (and every escaped process of a
# stopped job) then stays a zombie for the container's life.
NOT_INITS = ("sleep", "tail", "bash", "sh", "dash", "zsh", "cat", "python", "python3", "node", "java")


def _stat(pid):
    """(comm, state, ppid, start time) of a pid, or None."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    comm = s[s.index("(") + 1:s.rindex(")")]
    rest = s[s.rindex(")") + 2:].split()
    return comm, rest[0], int(rest[1]), int(rest[19])


def _zombies_of_1():
    out = set()
    for d in os.listdir("/proc"):
        st = _stat(d) if d.isdigit() else None
        if st and st[1] == "Z" and st[2] == 1:
            out.add((int(d), st[3], st[0]))
    return out


def pid1_reaps():
    """{"comm", "reaps", "zombies", "hint"}: whether pid 1 here reaps orphans. It does not
    when it is a plain program (sleep, tail, a shell) or when zombies under it outlive a
    moment (an init reaps them within milliseconds)."""
    one = _stat(1)
    if one is None:
        return {"comm": None, "reaps": None, "zombies": 0}
    zombies = _zombies_of_1()
    if zombies:
        time.sleep(0.2)
        zombies &= _zombies_of_1()
    reaps = not zombies and one[0] not in NOT_INITS
    out = {"comm": one[0], "reaps": reaps, "zombies": len(zombies),
           "zombie_comms": sorted(set(z[2] for z in zombies))[:10]}
    if not reaps:
        out["hint"] = ("pid 1 (%s) does not reap orphans: every ended shim stays a zombie; start the "
                       "container with an init: podman/docker run --init (or tini/catatonit as its "
                       "entrypoint; LXC and systemd containers have one)" % one[0])
    return out


# The standard modules some op imports when it is asked for (json and shutil are not here:
# minimal.py stands in for them where python3-minimal lacks them).
NEEDED_MODULES = ("calendar", "collections", "errno", "fcntl", "hashlib", "math", "pwd", "re", "select",
                  "signal", "socket", "struct", "subprocess", "traceback", "zlib")


def modules_missing():
    """The needed modules this python cannot import: each would fail the ops that use it."""
    out = []
    for name in NEEDED_MODULES:
        try:
            __import__(name)
        except ImportError:
            out.append(name)
    return out


def _state_dir(home):
    try:
        home.ensure()
        probe = os.path.join(home.path, ".doctor.%d" % os.getpid())
        write_atomic(probe, b"ok")
        os.unlink(probe)
        return {"path": home.path, "writable": True}
    except (OSError, AgentFailure) as e:
        return {"path": home.path, "writable": False, "error": str(e)}


def _nvidia_smi():
    import subprocess
    from ..core.minimal import which
    smi = which("nvidia-smi")
    out = {"path": smi}
    if smi:
        try:
            p = subprocess.run([smi, "-L"], capture_output=True, timeout=20)
            out.update({"exit": p.returncode, "output": (p.stdout + p.stderr).decode("utf-8", "replace")[:2000]})
        except (OSError, subprocess.TimeoutExpired) as e:
            out["error"] = str(e)
    return out


# What finds a run's processes where it gets no cgroup, and what then escapes all of it.
WITHOUT_CGROUPS = (
    "a run's processes are found by the marker (RUNWARD_RUN in their environment), the job's "
    "session and process group, and, while its shim lives, as the shim's descendants (a child "
    "subreaper: every orphan of the job's tree is reparented to it). What escapes all of them: "
    "a process that clears its environment, leaves the job's session (setsid) and outlives a "
    "shim that was killed (it then goes to pid 1; a shim whose job ended stays the parent of "
    "what it adopted until each has ended), or one the job had started outside its own tree "
    "(systemd-run, a daemon it asked, docker run)")
NO_SUBREAPER = ("python here lacks ctypes: the shim cannot be a child subreaper, so an orphan that "
                "cleared its environment and left the job's session escapes at once")


def _cgroups():
    """Whether a run here would get a cgroup: one is made and removed again; without one,
    what still finds a run's processes and what escapes."""
    made = cgroups.create("doctor-%d" % os.getpid(), 0)
    out = {"can_create": bool(made), "roots": [r for _, r in cgroups.roots()], "subreaper": _subreaper()}
    if not made:
        out["without"] = WITHOUT_CGROUPS
    if not out["subreaper"]:
        out["subreaper_note"] = NO_SUBREAPER
    cgroups.remove(made)
    for p in made:
        try:
            os.rmdir(os.path.dirname(p)) if not os.listdir(os.path.dirname(p)) else None
        except OSError:
            pass
    return out


def _subreaper():
    """Whether the shim here can make itself a child subreaper (shim._become_subreaper: prctl
    through ctypes, which python3-minimal lacks)."""
    try:
        import ctypes
        return callable(ctypes.CDLL(None).prctl)
    except Exception:
        return False
