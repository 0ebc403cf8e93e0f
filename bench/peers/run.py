#!/usr/bin/env python3
"""runward side by side with the shell way, supervisord and pm2: correctness and speed.

    python3 bench/peers/run.py [--rounds N] [--install-dir DIR] [--keep] [--out bench/RESULTS.md]

Installs supervisor (PyPI, into a venv) and pm2 (npm, `npm install --prefix`) into a scratch
directory, runs the correctness scenarios and the speed figures, ends every process it
started (by pid + start time), and writes bench/RESULTS.md. Stdlib only; Linux; needs
python3 >= 3.9 (pidfd), node/npm, and the runward venv at .venv (or --runward).
Ground truth is /proc, read by procfs.py, never a tool's own answer.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import procfs  # noqa: E402
import report  # noqa: E402
from tools import GRACE, Job, PM2, Res, Runward, Shell, Supervisor, clean_env, q, run  # noqa: E402

PY = sys.executable  # the jobs' interpreter: a real binary, not a pyenv shim
TRAIN_SRC = os.path.join(REPO, "examples", "train.py")
TESTBED = os.environ.get("RUNWARD_TESTBED") or "/tmp/runward-testbed"
PASS, FAIL, NA, ERROR = "pass", "fail", "n/a", "error"


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- install
class Install:
    def __init__(self, root, runward_bin):
        self.root = root
        self.venv = os.path.join(root, "venv")
        self.supervisord = os.path.join(self.venv, "bin", "supervisord")
        self.supervisorctl = os.path.join(self.venv, "bin", "supervisorctl")
        self.sv_python = os.path.join(self.venv, "bin", "python")
        self.npm = os.path.join(root, "npm")
        self.pm2 = os.path.join(self.npm, "node_modules", ".bin", "pm2")
        self.runward = runward_bin
        self.runward_python = os.path.join(os.path.dirname(runward_bin), "python")
        self.seconds = {}

    def ensure(self):
        os.makedirs(self.root, exist_ok=True)
        if not os.path.exists(self.supervisord):
            t = time.perf_counter()
            subprocess.run([PY, "-m", "venv", self.venv], check=True)
            subprocess.run([os.path.join(self.venv, "bin", "pip"), "install", "-q", "supervisor"], check=True,
                           env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
            self.seconds["supervisor (pip)"] = time.perf_counter() - t
        if not os.path.exists(self.pm2):
            t = time.perf_counter()
            subprocess.run(["npm", "install", "--prefix", self.npm, "--no-audit", "--no-fund", "--silent", "pm2"],
                           check=True, stdout=subprocess.DEVNULL)
            self.seconds["pm2 (npm)"] = time.perf_counter() - t

    def versions(self, pm2_env):
        def out(argv, env=None):
            try:
                p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=60)
                return p.stdout.decode().strip().splitlines()[-1] if p.stdout.strip() else "?"
            except (OSError, subprocess.TimeoutExpired) as e:
                return f"? ({e})"
        head = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %s", "--", "src"],
                              stdout=subprocess.PIPE).stdout
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "src"],
                               stdout=subprocess.PIPE).stdout.strip()
        return {
            "shell way": f"bash {out(['bash', '-c', 'echo $BASH_VERSION'])}; {out(['pgrep', '-V'])}; "
                         f"{out(['sh', '-c', 'nohup --version | head -1'])}",
            "supervisord": "supervisor " + out([self.supervisord, "--version"]),
            "pm2": "pm2 " + out([self.pm2, "--version"], pm2_env),
            "runward": out([self.runward, "--version"]) + f" (src/ at git {head.decode().strip()[:70]}"
                       + (", src/ has uncommitted changes" if dirty else "") + ")",
        }


def machine():
    mem = "?"
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1048576:.1f} GiB"

    def out(argv):
        try:
            return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode().strip()
        except OSError:
            return "?"
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "cpu": cpu, "memory": mem, "kernel": platform.release(),
            "os": out(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
            "python": platform.python_version() + f" ({PY})", "node": out(["node", "--version"]),
            "npm": out(["npm", "--version"]), "openssh": out(["ssh", "-V"])}


# --------------------------------------------------------------------------- cells
class Cell:
    """One scenario for one tool: its own directory, tag, train.py copy and tool instance."""

    def __init__(self, root, scenario, tool_cls, inst, prefix):
        self.d = os.path.join(root, "correctness", f"{scenario}-{tool_cls.key}")
        os.makedirs(self.d)
        self.tag = self.d
        self.train = os.path.join(self.d, "train.py")
        shutil.copy(TRAIN_SRC, self.train)
        self.tool = tool_cls(inst, os.path.join(self.d, "tool"), prefix) if tool_cls is Runward \
            else tool_cls(inst, os.path.join(self.d, "tool"))

    def job(self, name="j", **env):
        e = {"PEERBENCH_TAG": self.tag, "TRAIN_CHECKPOINT_DIR": os.path.join(self.d, "ckpt"),
             "TRAIN_LINGER_MAX_SECONDS": "60"}
        e.update(env)
        return Job(name, [PY, self.train], e, settle=1.0, cwd=self.d)

    def tree(self):
        return procfs.tagged(self.tag)

    def job_tree(self):
        """The job's processes, without runward's shim (which carries the job's environment)."""
        return [p for p in self.tree() if "runward-shim" not in procfs.cmdline(p.pid)]

    def mains(self):
        return [p for p in self.tree() if procfs.cmdline(p.pid)[1:] == [self.train]]

    def role(self, p):
        c = procfs.cmdline(p.pid)
        if "--escapee" in c:
            return "escapee (setsid + double fork)"
        if "--worker" in c:
            return f"worker {c[c.index('--worker') + 1]}"
        if "runward-shim" in c:
            return "runward shim"
        return "main"

    def wait_tree(self, n, need_escapee=False, timeout=15.0):
        def ok():
            t = self.job_tree()
            if len(t) >= n and (not need_escapee or any("escapee" in self.role(p) for p in t)):
                return t
            return None
        return procfs.wait_until(ok, timeout)

    def describe(self, idents):
        out = []
        for pid, start in idents:
            p = procfs.stat(pid)
            out.append(f"{self.role(p) if p else '?'} pid {pid}" + (f" (state {p.state}, ppid {p.ppid})" if p else ""))
        return ", ".join(out)

    def logs_contain(self, text):
        for path in self.tool.log_files("j"):
            try:
                with open(path, errors="replace") as f:
                    if text in f.read():
                        return True
            except OSError:
                pass
        return False


def stopped_tree(cell, before, s, window=5.0):
    """Verdict on a stop: every process of BEFORE dead within WINDOW s of the stop returning."""
    left = procfs.wait_dead([p.ident for p in before], window)
    extra = [p.ident for p in cell.tree() if p.ident not in {b.ident for b in before}]
    if not left and not extra:
        return PASS, f"all {len(before)} processes dead (stop exit {s.rc}, {s.dt:.1f} s)"
    return FAIL, f"{cell.describe(left + extra)} alive {window:g} s after the stop returned (stop exit {s.rc})"


# --------------------------------------------------------------------------- scenarios
def sc_escapee(cell):
    cell.tool.setup([cell.job(TRAIN_ESCAPEE_LINGER="1")])
    r = cell.tool.start("j")
    if not cell.tool.started_ok(r):
        return ERROR, f"start failed: {r.text()}"
    before = cell.wait_tree(4, need_escapee=True)
    if not before:
        return ERROR, "the job tree (main, 2 workers, escapee) did not appear"
    return stopped_tree(cell, before, cell.tool.stop("j"))


def sc_ignore_term(cell):
    cell.tool.setup([cell.job(TRAIN_IGNORE_TERM="1", TRAIN_ESCAPEE="0")])
    r = cell.tool.start("j")
    if not cell.tool.started_ok(r):
        return ERROR, f"start failed: {r.text()}"
    before = cell.wait_tree(3)
    if not before:
        return ERROR, "the job tree (main, 2 workers) did not appear"
    return stopped_tree(cell, before, cell.tool.stop("j"))


def sc_exit_code(cell):
    # exit at step 5 of 0.4 s: ~2.1 s, after every tool's 1 s settle
    cell.tool.setup([cell.job(TRAIN_EXIT_AT="5", TRAIN_EXIT_CODE="7", TRAIN_STEP_SECONDS="0.4")])
    r = cell.tool.start("j")
    if not cell.tool.started_ok(r):
        return ERROR, f"start failed (the job should live ~2 s): {r.text()}"
    if procfs.wait_until(lambda: not cell.mains(), 20) is False:
        return ERROR, "the job did not exit by itself"
    procfs.wait_until(lambda: not cell.tree(), 5)
    # the tool may learn of the exit a moment later: bounded wait for any answer
    got = procfs.wait_until(lambda: (lambda c: c if c[0] is not None else None)(cell.tool.exit_code("j")), 2.0,
                            interval=0.2)
    code, note = got or cell.tool.exit_code("j")
    if isinstance(cell.tool, Runward):
        left = runward_cgroups(cell.tool.rn("j") + ".")
        if left:
            note += f"; aside: its {len(left)} cgroup directories ({left[0]}, ...) were left behind"
    return (PASS if code == 7 else FAIL), note


def sc_fail_fast(cell):
    cell.tool.setup([cell.job(TRAIN_FAIL_FAST="1")])
    r = cell.tool.start("j", own=True)
    said3 = any(s in r.out + r.err for s in ("exit code 3", '"code": 3', "exit status 3"))
    if not cell.tool.started_ok(r):
        return PASS, (f"start exit {r.rc}" + (", exit code 3 reported" if said3 else ", exit code 3 not reported")
                      + f": {r.text(100)!r}")
    extra = ""
    if isinstance(cell.tool, PM2):
        a = cell.tool.app("j")
        if a:
            extra = f"; `pm2 jlist` afterwards: status {a['pm2_env'].get('status')}, exit_code {a['pm2_env'].get('exit_code')}"
    return FAIL, f"start exit {r.rc} ({r.text(80)!r}): the failure is not reported by the start{extra}"


def sc_self_kill(cell):
    t = cell.tool
    t.setup([cell.job(TRAIN_ESCAPEE="0")])
    r = t.start("j")
    if not t.started_ok(r):
        return ERROR, f"start failed: {r.text()}"
    before = cell.wait_tree(3)
    if not before:
        return ERROR, "the job tree did not appear"
    pattern = cell.train
    line = f"{t.inline_stop('j')} ; echo survived # {pattern}"
    res = run(["bash", "-c", line], env=t.cmd("stop", "j")[1], cwd=cell.d, timeout=60)
    dead = not procfs.wait_dead([p.ident for p in before], 5.0)
    if res.rc == 0 and "survived" in res.out:
        return PASS, f"the shell survived; job {'stopped' if dead else 'NOT stopped'}"
    how = f"killed by signal {-res.rc}" if res.rc < 0 else f"exit {res.rc}"
    return FAIL, (f"`bash -c '<stop>; echo survived # {os.path.basename(pattern)}'` {how}, 'survived' never "
                  f"printed; job {'stopped' if dead else 'NOT stopped'}")


def sc_restart_logs(cell):
    t = cell.tool
    t.setup([cell.job(TRAIN_ESCAPEE="0")])
    r = t.start("j")
    if not t.started_ok(r):
        return ERROR, f"start failed: {r.text()}"
    if not procfs.wait_until(lambda: cell.logs_contain("step 1 "), 10):
        return ERROR, "no `step 1` line in the log"
    m = cell.mains()
    if len(m) != 1:
        return ERROR, f"{len(m)} main processes before restart"
    p1 = m[0].pid
    rr = t.restart("j")

    def new_main():
        ms = [p for p in cell.mains() if p.pid != p1]
        return ms[0] if ms and cell.logs_contain(f"init pid={ms[0].pid} ") else None
    p2 = procfs.wait_until(new_main, 15)
    if not p2:
        return ERROR, f"no new attempt after restart (exit {rr.rc}: {rr.text(120)})"
    if cell.logs_contain(f"init pid={p1} "):
        return PASS, f"attempt 1's lines (init pid={p1}) still in the log after restart"
    return FAIL, f"attempt 1's lines (init pid={p1}) are gone from {', '.join(t.log_files('j'))} after restart"


def start_unrelated(cell):
    p = subprocess.Popen(["sleep", "300"], env=clean_env(PEERBENCH_TAG=cell.d + "/unrelated"),
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    threading.Thread(target=p.wait, daemon=True).start()  # reap it when it dies: no zombie
    procfs.wait_until(lambda: procfs.cmdline(p.pid) == ["sleep", "300"], 5)
    s = procfs.stat(p.pid)
    return (p.pid, s.start)


def kill_tree(cell, first=()):
    for ident in first:
        procfs.signal_ident(ident, signal.SIGKILL)
    procfs.wait_dead(list(first), 5)
    t = cell.tree()
    for p in t:
        procfs.signal_ident(p.ident, signal.SIGKILL)
    procfs.wait_dead([p.ident for p in t], 5)


def sc_stale_pid(cell):
    t = cell.tool
    if isinstance(t, Supervisor):
        return NA, ("supervisord keeps its programs' pids only in memory and is their parent: a pid cannot be "
                    "reused before supervisord reaps it, and there is no pid record on disk to forge")
    t.setup([cell.job(TRAIN_ESCAPEE="0")])
    r = t.start("j")
    if not t.started_ok(r):
        return ERROR, f"start failed: {r.text()}"
    if not cell.wait_tree(3):
        return ERROR, "the job tree did not appear"
    if isinstance(t, Shell):
        kill_tree(cell)  # the job died (crash, OOM kill); its pid file stays
        victim = start_unrelated(cell)
        with open(t.pidfile("j"), "w") as f:
            f.write(f"{victim[0]}\n")  # stands in for the pid being reused
        res = run(*t.cmd("killpid", "j"))
        how = "`kill $(cat j.pid)` after the job died and j.pid was rewritten to an unrelated `sleep`'s pid"
    elif isinstance(t, PM2):
        kill_tree(cell)  # crash: pm2 (the parent) sees the exit
        procfs.wait_until(lambda: (t.app("j") or {}).get("pm2_env", {}).get("status") != "online", 5, 0.2)
        victim = start_unrelated(cell)
        pidfile = t.pidfile("j")
        os.makedirs(os.path.dirname(pidfile), exist_ok=True)
        with open(pidfile, "w") as f:
            f.write(str(victim[0]))
        res = run(*t.cmd("stop", "j"))
        how = f"$PM2_HOME/pids/{os.path.basename(pidfile)} rewritten to an unrelated `sleep`'s pid after the job died; `pm2 stop j`"
    else:  # runward
        path = t.attempt_file("j")
        with open(path) as f:
            att = json.load(f)
        shim = (att["shim"]["pid"], att["shim"]["start"])
        kill_tree(cell, first=[shim])  # shim and job killed together (OOM killer): no exit recorded
        victim = start_unrelated(cell)
        att["job"]["pid"] = victim[0]  # the recorded pid now names an unrelated process; start time kept
        tmp = path + ".forge"
        with open(tmp, "w") as f:
            json.dump(att, f)
        os.replace(tmp, path)
        x = t.run_status("j") or {}
        res = t.stop("j")
        how = (f"shim and job SIGKILLed (no exit recorded), then attempt record job.pid rewritten to an unrelated "
               f"`sleep`'s pid (start time kept); status said {x.get('state')!r}; `runward stop`")
    gone = not procfs.wait_dead([victim], 1.0)
    procfs.signal_ident(victim, signal.SIGKILL)
    if gone:
        return FAIL, f"the unrelated process was killed ({how}; exit {res.rc})"
    return PASS, f"the unrelated process survived ({how}; exit {res.rc})"


def sc_concurrent(cell, trials=10):
    """Two starts issued at the same instant, TRIALS times, each time for a job the tool has never
    started (a fresh name: the first start of a name is where a check-then-act race lives).
    A race lost once is lost; a pass is evidence over TRIALS tries, not proof."""
    t = cell.tool
    names = [f"j{i}" for i in range(trials)]
    t.setup([cell.job(name=n, TRAIN_ESCAPEE="0") for n in names])
    seen = []
    for name in names:
        argv, env, cwd = t.cmd("start", name)
        ps = [subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE) for _ in range(2)]
        rcs, said = [], []
        for p in ps:
            try:
                o, e = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                o, e = p.communicate()
            rcs.append(p.returncode)
            said.append((o + e).decode("utf-8", "replace"))
        # both starts have returned, so a second job, if any, exists; give it a moment (bounded)
        procfs.wait_until(lambda: len(cell.mains()) >= 2, 0.5, interval=0.05)
        n = len(cell.mains())
        seen.append((n, rcs))
        if n == 0 and all("already running" in x for x in said):
            why = ("both starts refused with 'already running': each start's `pgrep -f` guard matched the "
                   "other start's `pgrep -f` (its argv holds the pattern)")
        elif n == 0:
            why = "no job started"
        elif isinstance(t, PM2) and n > 1:
            why = f"`pm2 jlist` lists {sum(1 for a in t.jlist() if a.get('name') == name)} apps named {name}"
        else:
            why = ""
        # reset: end the job (harness, by pid + start time), then let the tool see it gone
        kill_tree(cell)
        if isinstance(t, Runward):
            procfs.wait_until(lambda: (t.run_status(name) or {}).get("state") != "running", 5, 0.1)
        elif isinstance(t, PM2):
            procfs.wait_until(lambda: all(a["pm2_env"].get("status") != "online" for a in t.jlist()), 5, 0.1)
        elif isinstance(t, Supervisor):
            procfs.wait_until(lambda: "RUNNING" not in t.status(name).out, 5, 0.1)
        else:
            procfs.wait_until(lambda: t.status(name).rc != 0, 5, 0.1)
        if n != 1:
            break
    if all(n == 1 for n, _ in seen):
        exits = sorted({f"{a}/{b}" for _, (a, b) in seen})
        return PASS, f"{len(seen)} trials, one job each (start exits seen: {', '.join(exits)})"
    n, (a, b) = seen[-1]
    return FAIL, (f"trial {len(seen)} of {trials} gave {n} job{'s' if n != 1 else ''} (start exits {a} and {b})"
                  + (f": {why}" if why else ""))


SCENARIOS = [
    ("escapee", "a tree with a setsid'd, double-forked grandchild is fully gone after stop", sc_escapee),
    ("ignore-term", "a child that ignores TERM is gone after stop", sc_ignore_term),
    ("exit-code", "the exit code (7) of a job that crashed unattended is reported by the tool's status",
     sc_exit_code),
    ("fail-fast", "a command that fails at once (exit 3) is reported as failed by the start itself",
     sc_fail_fast),
    ("self-kill", "a stop issued from a shell whose command line holds the job's pattern leaves that shell alive",
     sc_self_kill),
    ("restart-logs", "logs of the previous attempt survive a restart", sc_restart_logs),
    ("stale-pid", "a stale pid that now belongs to another process is not killed", sc_stale_pid),
    ("concurrent", "two concurrent starts give one job (10 trials, a fresh name each)", sc_concurrent),
]


def correctness(root, inst, prefix, only=None):
    results = {}
    for key, _, fn in SCENARIOS:
        if only and key not in only:
            continue
        for cls in (Shell, Supervisor, PM2, Runward):
            cell = Cell(root, key, cls, inst, prefix)
            t0 = time.perf_counter()
            try:
                verdict, reason = fn(cell)
            except Exception as e:  # a harness error is reported, never a silent pass
                verdict, reason = ERROR, f"harness: {type(e).__name__}: {e}"
                traceback.print_exc()
            finally:
                killed = procfs.sweep(cell.d)
            results[(key, cls.key)] = {"verdict": verdict, "reason": reason, "seconds": time.perf_counter() - t0,
                                       "cleanup_killed": len(killed)}
            log(f"{key:13s} {cls.key:10s} {verdict:5s} {reason[:150]}")
    return results


# --------------------------------------------------------------------------- speed helpers
def rotate(xs, r):
    r %= len(xs)
    return xs[r:] + xs[:r]


def timed_stop(argv, env, cwd, idents, timeout=60.0):
    """Issue a stop; return (seconds until every ident is dead per pidfd, seconds until it returned, rc)."""
    fds = procfs.open_pidfds(idents)
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    pfd = os.pidfd_open(p.pid)
    poller = select_poll(list(fds) + [pfd])
    t_dead = t_ret = None
    if not fds:
        t_dead = 0.0
    deadline = t0 + timeout
    while (t_dead is None or t_ret is None) and time.perf_counter() < deadline:
        for fd, _ in poller.poll(max(1, (deadline - time.perf_counter()) * 1000)):
            poller.unregister(fd)
            now = time.perf_counter() - t0
            if fd == pfd:
                t_ret = now
            else:
                fds.pop(fd)
                os.close(fd)
                if not fds:
                    t_dead = now
    rc = p.wait(timeout=max(1.0, deadline - time.perf_counter()))
    os.close(pfd)
    for fd in fds:
        os.close(fd)
    return t_dead, t_ret, rc


def select_poll(fds):
    import select
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return poller


class Samples:
    def __init__(self):
        self.data = {}   # (metric, tool) -> [seconds]
        self.notes = {}  # (metric, tool) -> [text]

    def add(self, metric, tool, v):
        self.data.setdefault((metric, tool), []).append(v)

    def note(self, metric, tool, text):
        self.notes.setdefault((metric, tool), [])
        if text not in self.notes[(metric, tool)]:
            self.notes[(metric, tool)].append(text)


def speed_start_stop(root, inst, prefix, rounds, S):
    tools = []
    for cls in (Shell, Supervisor, PM2, Runward):
        d = os.path.join(root, "speed", cls.key)
        os.makedirs(d)
        train = os.path.join(d, "train.py")
        shutil.copy(TRAIN_SRC, train)
        t = cls(inst, os.path.join(d, "tool"), prefix) if cls is Runward else cls(inst, os.path.join(d, "tool"))
        job = Job("j", [PY, train], {"PEERBENCH_TAG": d, "TRAIN_ESCAPEE": "0", "TRAIN_CHECKPOINT_SECONDS": "0",
                                     "TRAIN_CHECKPOINT_DIR": os.path.join(d, "ckpt")}, settle=1.0, cwd=d)
        t.setup([job])
        tools.append((t, d, train))

    def tree(d):  # the job's processes (runward's shim carries the job's env: not the job)
        return [p for p in procfs.tagged(d) if "runward-shim" not in procfs.cmdline(p.pid)]

    def stepping(t, d, train):
        """The job is in its steady state: the log's last `init pid=P` has a `step 1` after it,
        and P is alive and is this job's main process (read from the log first: cheap)."""
        for path in t.log_files("j"):
            try:
                with open(path, errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            i = text.rfind("init pid=")
            if i < 0 or "\nstep 1 " not in text[i:]:
                continue
            pid = int(text[i + 9:].split(None, 1)[0])
            st = procfs.stat(pid)
            return bool(st and not st.dead and procfs.cmdline(pid)[1:] == [train])
        return False

    def main_alive(d, train):
        return any(procfs.cmdline(p.pid)[1:] == [train] for p in tree(d))

    for r in range(rounds):
        for t, d, train in rotate(tools, r):
            for floor in (False, True):
                metric = "start, floor (no settle)" if floor else "start to verified alive (settle 1 s)"
                res = t.start("j", floor=floor)
                ok = t.started_ok(res) and main_alive(d, train)
                if ok:
                    S.add(metric, t.key, res.dt)
                else:
                    S.note(metric, t.key, f"round {r}: not verified ({res.text(100)})")
                # stop only a job in its steady state: its `step 1` line is in the log
                procfs.wait_until(lambda: stepping(t, d, train), 10, interval=0.05)
                idents = [p.ident for p in tree(d)]
                if floor and t.key != "shell":
                    argv, env, cwd = t.cmd("stop", "j")
                    timed_stop(argv, env, cwd, idents)
                else:
                    argv, env, cwd = t.cmd("stop", "j", floor=floor)
                    dead, ret, rc = timed_stop(argv, env, cwd, idents)
                    sfx = ", floor (`pkill -f` alone)" if floor else ""
                    if dead is None:
                        S.note("stop: issued to tree dead" + sfx, t.key, f"round {r}: tree not dead in 60 s")
                    else:
                        S.add("stop: issued to tree dead" + sfx, t.key, dead)
                    S.add("stop: issued to command returned" + sfx, t.key, ret)
                left = procfs.wait_dead(idents, 10)
                if left:
                    S.note("stop: issued to tree dead", t.key, f"round {r}: {len(left)} left, swept")
                    for ident in left:
                        procfs.signal_ident(ident, signal.SIGKILL)
        log(f"start/stop round {r + 1}/{rounds} done")
    for _, d, _ in tools:
        procfs.sweep(d)


def speed_cli(inst, pm2_home, rounds, S):
    e = clean_env()
    pe = clean_env(PM2_HOME=pm2_home)
    cases = {
        "CLI start-up: --help": {"shell": (["pgrep", "--help"], e), "supervisor": ([inst.supervisorctl, "--help"], e),
                                  "pm2": ([inst.pm2, "--help"], pe), "runward": ([inst.runward, "--help"], e)},
        "CLI start-up: --version": {"shell": (["pgrep", "--version"], e),
                                     "supervisor": ([inst.supervisord, "--version"], e),
                                     "pm2": ([inst.pm2, "--version"], pe), "runward": ([inst.runward, "--version"], e)},
    }
    run([inst.pm2, "ping"], env=pe)  # pm2 --version/--help start its daemon when none runs: have one
    for metric, tools in cases.items():
        for argv, env in tools.values():  # warm the page cache and bytecode
            run(argv, env=env)
    keys = ["shell", "supervisor", "pm2", "runward"]
    for r in range(rounds):
        for metric, tools in cases.items():
            for k in rotate(keys, r):
                argv, env = tools[k]
                res = run(argv, env=env)
                if res.rc == 0:
                    S.add(metric, k, res.dt)
                else:
                    S.note(metric, k, f"exit {res.rc}")


def mem_available_gib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1048576
    return 0.0


def speed_status(root, inst, prefix, rounds, S, sizes, feasibility, budget_s=240.0):
    tools = []
    for cls in (Shell, Supervisor, PM2, Runward):
        d = os.path.join(root, "status", cls.key)
        os.makedirs(d)
        t = cls(inst, os.path.join(d, "tool"), prefix) if cls is Runward else cls(inst, os.path.join(d, "tool"))
        tools.append({"t": t, "d": d, "n": 0, "setup_s": 0.0, "stopped": None})
    sleep_bin = shutil.which("sleep")
    # set-up order: runward first, then the daemons, the shell way last (its set-up is instant).
    # runward's start reads /proc, so it is set up while /proc is smallest: set-up is not a figure
    setup_order = [tools[3], tools[1], tools[2], tools[0]]
    for n in sizes:
        for x in setup_order:
            if x["stopped"]:
                continue
            t, d = x["t"], x["d"]
            while x["n"] < n:
                # in batches of 100, with a memory and time guard: "largest feasible", never a swap storm
                batch = min(n - x["n"], 100 if n > 100 else n)
                if mem_available_gib() < 3.0:
                    x["stopped"] = f"stopped at {x['n']} runs: MemAvailable below 3 GiB"
                    break
                if x["setup_s"] > budget_s:
                    x["stopped"] = f"stopped at {x['n']} runs: set-up took over {budget_s:g} s"
                    break
                names = [f"s{i}" for i in range(x["n"], x["n"] + batch)]
                res = t.add_many(names, [sleep_bin, "3600"], {"PEERBENCH_TAG": d})
                x["setup_s"] += res.dt
                if res.rc != 0:
                    x["stopped"] = f"stopped at {x['n']} runs: set-up failed: {res.text(200)}"
                    break
                x["n"] += batch
            # wait (bounded) until all N are running: the tool's own status, or for the shell way
            # (whose status loop is the slow thing measured) its pid files checked against /proc
            if t.key == "shell":
                def ready():
                    pdir = os.path.join(t.d, "pids")
                    ok = 0
                    for f in os.listdir(pdir):
                        if f.endswith(".pid"):
                            with open(os.path.join(pdir, f)) as fh:
                                st = procfs.stat(int(fh.read().strip() or 0))
                            ok += bool(st and not st.dead)
                    return ok >= x["n"]
            else:
                def ready():
                    return t.count_running(run(t.status_many_argv(), env=t.env, timeout=300)) >= x["n"]
            got = procfs.wait_until(ready, 180, interval=1.0)
            feasibility[(t.key, n)] = {"runs": x["n"], "setup_s": round(x["setup_s"], 1), "note": x["stopped"],
                                       "all_running": bool(got)}
            log(f"status set-up {t.key}: {x['n']} runs in {x['setup_s']:.1f} s" + (f" ({x['stopped']})" if x["stopped"] else ""))
        r_n = rounds if n < 1000 else max(3, rounds // 2)
        metric = f"status, {n} run{'s' if n > 1 else ''}"
        # the shell way's loop runs one pgrep per pid file, and each pgrep reads all of /proc: time
        # one pgrep now, and if the full loop would pass ~20 s, time it over the first K files only
        sample = None
        sh = tools[0]
        if sh["n"] >= 100:
            one = run(["pgrep", "-F", os.path.join(sh["t"].d, "pids", "s0.pid")])
            if one.dt * sh["n"] > 20:
                sample = max(10, min(sh["n"], int(4.0 / max(one.dt, 1e-3))))
                S.note(metric, "shell", f"EST: extrapolated: the loop timed over the first {sample} of "
                       f"{sh['n']} pid files, scaled by {sh['n'] / sample:.1f} (one pgrep took {one.dt:.2f} s "
                       f"with /proc this full; the whole loop would take about {one.dt * sh['n']:.0f} s a round)")
        for x in tools:  # warm-up
            t = x["t"]
            k = sample if (t.key == "shell" and sample) else None
            run(t.status_many_argv(k) if k else t.status_many_argv(), env=t.env, timeout=300)
        for r in range(r_n):
            for x in rotate(tools, r):
                t = x["t"]
                k = sample if (t.key == "shell" and sample) else None
                res = run(t.status_many_argv(k) if k else t.status_many_argv(), env=t.env, timeout=300)
                seen = t.count_running(res)
                want = k or x["n"]
                if res.rc not in (0, 3) or seen != want:
                    S.note(metric, t.key, f"round {r}: exit {res.rc}, {seen} of {want} reported running")
                dt = res.dt * (x["n"] / k) if k else res.dt
                if x["n"] == n:
                    S.add(metric, t.key, dt)
                else:
                    S.add(f"{metric} (largest feasible: {x['n']})", t.key, dt)
        log(f"status with {n} runs: {r_n} rounds done")
    for x in tools:
        procfs.sweep(x["d"], timeout=60)


# --------------------------------------------------------------------------- remote
def speed_remote(root, inst, prefix, rounds, S, info):
    cfg = os.path.join(TESTBED, "ssh_config")
    hosts = [f"rw{i}-slow" for i in range(1, 9)]
    if not os.path.exists(cfg):
        info["skipped"] = f"no testbed at {TESTBED} (run scripts/testbed up)"
        return
    d = os.path.join(root, "remote")
    os.makedirs(os.path.join(d, "ssh"))
    sshb = ["ssh", "-F", cfg, "-o", "ControlMaster=auto", "-o", f"ControlPath={d}/ssh/%C",
            "-o", "ControlPersist=600"]
    r = run(sshb + [hosts[0], "true"], timeout=30)
    if r.rc != 0:
        info["skipped"] = f"ssh {hosts[0]} failed: {r.text()}"
        return
    # one job per host for every tool; the hosts are network namespaces on this machine,
    # so every job runs here and every tool's state is reachable by path from each host
    jobs = []
    for i in range(1, 9):
        path = os.path.join(d, "jobs", f"job_h{i}.py")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("import time\ntime.sleep(3600)\n")
        jobs.append(path)
    tag = {"PEERBENCH_TAG": d}
    shells = []
    for i in range(8):
        sh = Shell(inst, os.path.join(d, "shell", f"h{i + 1}"))
        sh.setup([Job("j", [PY, jobs[i]], tag, settle=0)])
        run(*sh.cmd("start", "j", floor=True))
        shells.append(sh)
    svs, pms = [], []
    for i in range(8):
        sv = Supervisor(inst, os.path.join(d, "sv", f"h{i + 1}"))
        sv.add_many(["j"], [PY, jobs[i]], tag)
        svs.append(sv)
        pm = PM2(inst, os.path.join(d, "pm2", f"h{i + 1}"))
        pm.add_many(["j"], [PY, jobs[i]], tag)
        pms.append(pm)
    toml = os.path.join(d, "runward.toml")
    with open(toml, "w") as f:
        for i in range(1, 9):
            # python: the interpreter by path, as the peers' commands are given by path (the PATH's
            # python3 on these hosts is a pyenv shim)
            f.write(f'[targets.h{i}]\non = "ssh://rw{i}-slow"\nhome = "{d}/rw/h{i}"\npython = "{PY}"\n\n')
    rw_env = clean_env(RUNWARD_HOME=os.path.join(d, "rw", "local"), RUNWARD_SSH_CONFIG=cfg)
    # distinct run names per host: runward's cgroup/marker names are per machine (see RESULTS.md)
    starts = [subprocess.Popen([inst.runward, "start", f"{prefix}j{i}", "--on", f"h{i}", "--config", toml,
                                "--settle", "0", "--json", "--env", f"PEERBENCH_TAG={d}", "--", PY, jobs[i - 1]],
                               env=rw_env, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
              for i in range(1, 9)]
    for p in starts:
        p.communicate(timeout=120)
        if p.returncode != 0:
            info.setdefault("notes", []).append(f"runward remote start exit {p.returncode}")

    def script(name, lines, parallel):
        path = os.path.join(d, name + ".sh")
        with open(path, "w") as f:
            for ln in lines:
                f.write(ln + (" &\n" if parallel else "\n"))
            if parallel:
                f.write("wait\n")
        return ["bash", path]

    sshq = " ".join(q(a) for a in sshb)
    one = {
        "shell": (sshb + [hosts[0], f"pgrep -f {q(jobs[0])}"], clean_env()),
        "supervisor": (sshb + [hosts[0], f"{q(inst.supervisorctl)} -c {q(svs[0].conf)} status"], clean_env()),
        "pm2": (sshb + [hosts[0], f"PM2_HOME={q(pms[0].home)} {q(inst.pm2)} jlist"], clean_env()),
        "runward": ([inst.runward, "status", "--on", "h1", "--config", toml, "--json"], rw_env),
    }
    eight = {
        "shell-seq": (script("shell_seq", [f"{sshq} {h} {q('pgrep -f ' + q(jobs[i]))}"
                                                         for i, h in enumerate(hosts)], False), clean_env()),
        "shell": (script("shell_par", [f"{sshq} {h} {q('pgrep -f ' + q(jobs[i]))} >/dev/null"
                                       for i, h in enumerate(hosts)], True), clean_env()),
        "supervisor": (script("sv_par", [f"{sshq} {h} {q(q(inst.supervisorctl) + ' -c ' + q(svs[i].conf) + ' status')} >/dev/null"
                                         for i, h in enumerate(hosts)], True), clean_env()),
        "pm2": (script("pm2_par", [f"{sshq} {h} {q('PM2_HOME=' + q(pms[i].home) + ' ' + q(inst.pm2) + ' jlist')} >/dev/null"
                                   for i, h in enumerate(hosts)], True), clean_env()),
        "runward": ([inst.runward, "status", "--all", "--config", toml, "--json"], rw_env),
    }
    checks = {"shell": lambda o: o.strip() != "", "supervisor": lambda o: "RUNNING" in o,
              "pm2": lambda o: '"online"' in o, "runward": lambda o: '"running"' in o}
    for argv, env in list(one.values()) + list(eight.values()):  # warm: open every ControlMaster
        run(argv, env=env, cwd=d, timeout=60)
    m1, m8 = "status over ssh, 1 host (+20 ms each way)", "status over ssh, 8 hosts (+20 ms each way)"
    m8s = "status over ssh, 8 hosts, shell sequential loop"
    for r in range(rounds):
        for k in rotate(list(one), r):
            argv, env = one[k]
            res = run(argv, env=env, cwd=d, timeout=60)
            if res.rc == 0 and checks[k](res.out):
                S.add(m1, k, res.dt)
            else:
                S.note(m1, k, f"round {r}: exit {res.rc} {res.text(80)}")
        for k in rotate(list(eight), r):
            argv, env = eight[k]
            res = run(argv, env=env, cwd=d, timeout=60)
            metric, tk = (m8s, "shell") if k == "shell-seq" else (m8, k)
            if res.rc == 0 and (k != "runward" or res.out.count('"running"') >= 8):
                S.add(metric, tk, res.dt)
            else:
                S.note(metric, tk, f"round {r}: exit {res.rc} {res.text(80)}")
    log(f"remote: {rounds} rounds done")
    for i in range(1, 9):
        run([inst.runward, "stop", f"{prefix}j{i}", "--on", f"h{i}", "--config", toml, "--grace", "2", "--json"],
            env=rw_env, cwd=d, timeout=60)
    procfs.sweep(d, timeout=60)


def runward_cgroups(prefix):
    """runward's per-run cgroup directories of this bench's runs (named <run>.<attempt>)."""
    import glob
    return [d for d in glob.glob(f"/sys/fs/cgroup/*/runward/{prefix}*") if os.path.isdir(d)]


def remove_cgroups(prefix):
    n = 0
    for d in runward_cgroups(prefix):
        try:
            os.rmdir(d)  # only empty ones go: a cgroup with a live member refuses
            n += 1
        except OSError:
            pass
    return n


# --------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6, help="speed rounds (status with 1000 runs: half, >= 3)")
    ap.add_argument("--scratch", help="scratch directory (default: a new /tmp/runward-peers-*)")
    ap.add_argument("--install-dir", help="reuse peers installed here (default: inside the scratch dir)")
    ap.add_argument("--runward", default=os.path.join(REPO, ".venv", "bin", "runward"))
    ap.add_argument("--sizes", default="1,100,1000", help="run counts for the status figure")
    ap.add_argument("--only", help="comma list of sections: correctness,startstop,cli,status,remote")
    ap.add_argument("--scenarios", help="comma list of scenario keys (default: all)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "RESULTS.md"))
    a = ap.parse_args()
    if not os.path.exists(a.runward):
        sys.exit(f"runward not found at {a.runward}: python3 -m venv .venv && .venv/bin/pip install -e .")
    t_all = time.perf_counter()
    root = os.path.realpath(a.scratch or tempfile.mkdtemp(prefix="runward-peers-"))
    os.makedirs(root, exist_ok=True)
    inst = Install(a.install_dir or os.path.join(root, "install"), a.runward)
    prefix = "pb%04x-" % random.getrandbits(16)
    sections = set((a.only or "correctness,startstop,cli,status,remote").split(","))
    data = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "rounds": a.rounds, "scratch": root}
    S = Samples()
    try:
        log(f"scratch {root}; installing peers")
        inst.ensure()
        data["install_s"] = inst.seconds
        data["machine"] = machine()
        data["src_head"] = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h", "--", "src"],
                                          stdout=subprocess.PIPE).stdout.decode().strip()
        data["versions"] = inst.versions(clean_env(PM2_HOME=os.path.join(root, "pm2-version")))
        procfs.sweep(os.path.join(root, "pm2-version"))
        data["config"] = {c.key: c.CONFIG for c in (Shell, Supervisor, PM2, Runward)}
        data["load_before"] = os.getloadavg()
        if "correctness" in sections:
            data["correctness"] = correctness(root, inst, prefix, a.scenarios and a.scenarios.split(","))
        if "startstop" in sections:
            speed_start_stop(root, inst, prefix, a.rounds, S)
        if "cli" in sections:
            pm2_home = os.path.join(root, "cli-pm2")
            speed_cli(inst, pm2_home, a.rounds * 2, S)
            procfs.sweep(pm2_home)
        if "status" in sections:
            feas = {}
            speed_status(root, inst, prefix, a.rounds, S, [int(x) for x in a.sizes.split(",")], feas)
            data["feasibility"] = feas
        if "remote" in sections:
            info = {}
            speed_remote(root, inst, prefix, a.rounds, S, info)
            data["remote"] = info
    finally:
        leftover = procfs.sweep(root, timeout=60)
        data["final_sweep_killed"] = leftover
        if leftover:
            log(f"final sweep killed {len(leftover)}: {leftover[:5]}")
        data["cgroups_removed"] = remove_cgroups(prefix)
    data["seconds"] = time.perf_counter() - t_all
    head_end = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h", "--", "src"],
                              stdout=subprocess.PIPE).stdout.decode().strip()
    if data.get("src_head") and head_end != data["src_head"]:
        data["versions"]["runward"] += (f" — NOTE: src/ changed during this run ({data['src_head']} -> {head_end}): "
                                        "figures taken before and after the change are mixed")
    data["load_after"] = os.getloadavg()
    data["samples"] = {f"{m}|{t}": v for (m, t), v in S.data.items()}
    data["notes"] = {f"{m}|{t}": v for (m, t), v in S.notes.items()}
    data["correctness"] = {f"{k[0]}|{k[1]}": v for k, v in data.get("correctness", {}).items()}
    data["feasibility"] = {f"{k[0]}|{k[1]}": v for k, v in data.get("feasibility", {}).items()}
    with open(os.path.join(root, "results.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    text = report.render(data, [(k, desc) for k, desc, _ in SCENARIOS])
    with open(a.out, "w") as f:
        f.write(text)
    log(f"wrote {a.out} in {data['seconds']:.0f} s (raw: {root}/results.json)")
    if not a.keep and not a.install_dir:
        shutil.rmtree(root, ignore_errors=True)
    elif not a.keep:
        for sub in ("correctness", "speed", "status", "remote"):
            shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
