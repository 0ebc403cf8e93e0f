"""doctor: what works on this target and what does not."""

import os
import sys
import time

from .. import cgroups, resident
from ..procfs import boot_id, in_container
from ..store import write_atomic
from ..wire import AgentFailure


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
    return checks


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
    import shutil
    import subprocess
    smi = shutil.which("nvidia-smi")
    out = {"path": smi}
    if smi:
        try:
            p = subprocess.run([smi, "-L"], capture_output=True, timeout=20)
            out.update({"exit": p.returncode, "output": (p.stdout + p.stderr).decode("utf-8", "replace")[:2000]})
        except (OSError, subprocess.TimeoutExpired) as e:
            out["error"] = str(e)
    return out


def _cgroups():
    """Whether a run here would get a cgroup: one is made and removed again."""
    made = cgroups.create("doctor-%d" % os.getpid(), 0)
    out = {"can_create": bool(made), "roots": [r for _, r in cgroups.roots()]}
    cgroups.remove(made)
    for p in made:
        try:
            os.rmdir(os.path.dirname(p)) if not os.listdir(os.path.dirname(p)) else None
        except OSError:
            pass
    return out
