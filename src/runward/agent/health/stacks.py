"""The Python stacks of a run's processes on this target, read with py-spy (`py-spy dump
--json`), grouped by each process's innermost meaningful frame and named by rank.

A hung distributed run is alive but not working: one rank stuck in a collective while the
others wait. Which frame each rank is in says which one. py-spy reads another process's memory
(ptrace), so it needs the same user (and yama ptrace_scope <= 1, or CAP_SYS_PTRACE); nothing of
the job is changed or needs changing. capture() never raises for "cannot": the document says
why (py-spy missing, ptrace denied, a process gone mid-capture, not a Python process), per
process where it is per process. docs/diagnosis.md has the document's shape.

Stdlib only; imported by the stacks operation and the shim's health action only.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
import time

from ..core.procfs import ProcTable, live, protected, scan
from ..proc.runs import members
from .stackgroup import group, meaningful, native_above, summary  # noqa: F401 (meaningful: part of the interface)
from ..core.store import write_json

VERSION = 1  # the document's format
KEEP = 10  # captures kept per run (the newest); older ones are removed by keep()
INSTALL_HINT = ("install py-spy on the target (`pip install py-spy`, or `pip install "
                "'runward[stacks]'` where runward runs and `runward stacks --bring-py-spy`)")


def sha256_of(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def brought(home_dir, want=None):
    """runward's own py-spy under its home (`--bring-py-spy` pushed it), or None: run only
    when its bytes are the ones pushed: WANT (this call's push) or the hash recorded beside it
    when it was checked (rule 10: nothing is executed unchecked)."""
    from ..core.store import read_json
    path = os.path.join(home_dir, "tools", "py-spy")
    try:
        got = sha256_of(path)
        if want is None:
            want = (read_json(path + ".sha256.json") or {}).get("sha256")
        elif got == want:
            write_json(path + ".sha256.json", {"sha256": want})
    except OSError:
        return None
    return path if got == want else None


def find_py_spy(home_dir=None, want=None):
    """py-spy on this target: runward's own copy (brought, under its home, hash-checked), PATH,
    or beside the python3 that runs us (a venv's bin, where `pip install py-spy` puts it)."""
    cands = []
    if home_dir and brought(home_dir, want):
        cands.append(os.path.join(home_dir, "tools", "py-spy"))
    w = shutil.which("py-spy")
    if w:
        cands.append(w)
    for py in (sys.executable, shutil.which("python3")):
        if py:
            cands.append(os.path.join(os.path.dirname(py), "py-spy"))
            cands.append(os.path.join(os.path.dirname(os.path.realpath(py)), "py-spy"))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def ptrace_hint():
    """What lets py-spy attach here, with the value that stopped it."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = f.read().strip()
    except OSError:
        scope = None
    # a same-user process can still refuse: one that set itself non-dumpable (prctl
    # PR_SET_DUMPABLE 0, as hardened launchers do) is traceable by root (CAP_SYS_PTRACE) only
    h = "py-spy needs ptrace: run as the job's user (a non-dumpable process: as root)"
    if scope and scope not in ("0", "1"):
        h += "; kernel.yama.ptrace_scope is %s here (needs <= 1, or root)" % scope
    return h + "; in a container, CAP_SYS_PTRACE (--cap-add SYS_PTRACE), or read it from the host by the host pid"


def _who(p):
    """RANK / LOCAL_RANK / the node from the process's own environment (torchrun sets them)."""
    out = {}
    for key, env in (("rank", "RANK"), ("local_rank", "LOCAL_RANK"), ("group_rank", "GROUP_RANK")):
        v = p.env(env)
        if v is not None and v.strip().isdigit():
            out[key] = int(v)
    return out


def _frames(thread):
    # py-spy names the shared library of a native frame in `module` (None for Python frames)
    return [dict({"name": f.get("name"), "file": f.get("short_filename") or f.get("filename"),
                  "line": f.get("line")}, **({"native": True} if f.get("module") else {}))
            for f in thread.get("frames") or ()]


def _classify(err, p):
    """py-spy's error text as a reason and a hint."""
    low = err.lower()
    if not live(p.ident()):
        return "gone", "the process ended during the capture"
    if _stopped(p.pid):  # ptrace cannot attach a stopped process either: not a permission
        return "stopped", ("the process is stopped (SIGSTOP, Ctrl-Z, a debugger): its stack is read once it runs "
                           "(`kill -CONT %d`), or stop the run" % p.pid)
    if "permission denied" in low or "operation not permitted" in low or "ptrace" in low:
        return "ptrace denied", ptrace_hint()
    if "python version" in low or "python interpreter" in low or "not a python" in low:
        return "not python", "not a Python process (a shell or launcher): no Python stack"
    return "failed", (err.strip().splitlines() or ["py-spy failed"])[0][:300]


def _stopped(pid):
    """PID is stopped now (state T: a stop signal; t: a tracer's stop)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return f.read().rsplit(b") ", 1)[1][:1] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def _dump_one(spy, p, native, timeout):
    argv = [spy, "dump", "--pid", str(p.pid), "--json"] + (["--native"] if native else [])
    out = dict({"pid": p.pid, "start": p.start, "comm": p.comm,
                "cmd": " ".join(p.cmdline())[:300]}, **_who(p))
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        out.update(error="timeout", hint="py-spy did not answer within %gs" % timeout)
        return out
    except OSError as e:
        out.update(error="failed", hint="cannot run %s: %s" % (spy, e))
        return out
    try:
        threads = json.loads(r.stdout.decode("utf-8", "replace")) if r.returncode == 0 else None
    except ValueError:
        threads = None
    if not isinstance(threads, list):
        out["error"], out["hint"] = _classify(r.stderr.decode("utf-8", "replace") or r.stdout.decode(
            "utf-8", "replace"), p)
        return out
    out["threads"] = [{"id": t.get("thread_id"), "name": t.get("thread_name"),
                       "active": t.get("active"), "frames": _frames(t)} for t in threads]
    main = next((t for t in out["threads"] if t["name"] == "MainThread"), None) or \
        (out["threads"][0] if out["threads"] else None)
    out["frame"] = meaningful(main["frames"]) if main else None
    nf = native_above(main["frames"]) if main and native else None
    if nf:
        out["native_frame"] = nf
    return out


def capture(rec, native=False, timeout=10.0, home_dir=None, want=None, extra=None):
    """One node's capture: every live member of the attempt REC (the set status counts: job
    tree, marker, cgroup, adopted), and EXTRA ({pid: Proc}: an engine's processes of the job
    outside that set, workers the engine started), dumped by py-spy in parallel, within TIMEOUT
    seconds. Never raises for "cannot": `ok` False with `error` and `hint` say why."""
    t0 = time.time()
    doc = {"v": VERSION, "run": rec.get("run"), "attempt": rec.get("attempt"), "at": t0,
           "native": bool(native), "host": os.uname()[1], "machine": os.uname()[4], "procs": []}
    node = (rec.get("multinode") or {}).get("rank")
    if node is not None:
        doc["node"] = node
    procs = ProcTable(scan())
    mem = members(rec.get("run"), rec, procs, protected(procs))
    mem.update(extra or {})
    spy = find_py_spy(home_dir, want)
    if want and spy != os.path.join(home_dir or "", "tools", "py-spy"):
        doc.update(ok=False, error="py-spy hash mismatch",
                   hint="the py-spy pushed to %s/tools is not the bytes sent; run again" % home_dir)
    elif not mem:
        doc.update(ok=False, error="no live process", hint="the run has no live process on this target")
    elif spy is None:
        doc.update(ok=False, error="py-spy missing", hint=INSTALL_HINT)
    else:
        doc["py_spy"] = spy
        res = {}
        ths = [threading.Thread(target=lambda p=p: res.__setitem__(p.pid, _dump_one(spy, p, native, timeout)))
               for p in mem.values()]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        doc["procs"] = [res[pid] for pid in sorted(res)]
        read = [p for p in doc["procs"] if "frame" in p]
        doc["ok"] = bool(read)
        if not read:
            first = doc["procs"][0]
            doc.update(error=first.get("error"), hint=first.get("hint"))
    doc["took_s"] = round(time.time() - t0, 3)
    doc["groups"] = group(doc["procs"])
    doc["summary"] = summary(doc)
    return doc


def _run_dir(rec, home):
    from ..core.store import Home
    return (home or Home()).run_dir(rec.get("run"))


def keep(rec, doc, home=None):
    """Keep DOC beside the run's records (<run dir>/stacks/<attempt>-<ms>.json; HOME a
    store.Home, default this user's), the newest KEEP only; rm removes the run's directory
    and these with it. Returns the path."""
    d = os.path.join(_run_dir(rec, home), "stacks")
    os.makedirs(d, mode=0o700, exist_ok=True)
    path = os.path.join(d, "%d-%d.json" % (int(rec.get("attempt") or 0), int(doc.get("at", time.time()) * 1000)))
    write_json(path, doc)
    old = sorted((f for f in os.listdir(d) if f.endswith(".json")),
                 key=lambda f: [int(x) for x in f[:-5].split("-") if x.isdigit()])
    for f in old[:-KEEP]:
        try:
            os.unlink(os.path.join(d, f))
        except OSError:
            pass
    return path


def latest(rec, home=None, attempt=None):
    """The newest kept capture of REC's run (of ATTEMPT, when given), or None."""
    d = os.path.join(_run_dir(rec, home), "stacks")
    try:
        fs = [f for f in os.listdir(d) if f.endswith(".json")]
    except OSError:
        return None
    if attempt is not None:
        fs = [f for f in fs if f.startswith("%d-" % int(attempt))]
    if not fs:
        return None
    from ..core.store import read_json
    return read_json(os.path.join(d, max(fs, key=lambda f: [int(x) for x in f[:-5].split("-") if x.isdigit()])))
