"""The four ways of running a job that the benchmark compares, each in its best honest
configuration. Every choice made for a tool is written in its CONFIG text, which RESULTS.md
prints. A tool instance owns one state directory; everything it starts mentions that
directory (command line or environment), so procfs.sweep(dir) ends all of it by pid+start.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time

import procfs

ANSI = re.compile(r"\x1b\[[0-9;]*m")
GRACE = 3.0  # stop grace, seconds: the same for every tool (and the shell way's fixed sleep)


class Res:
    __slots__ = ("rc", "out", "err", "dt")

    def __init__(self, rc, out, err, dt):
        self.rc, self.out, self.err, self.dt = rc, out, err, dt

    def text(self, n=300):
        s = ANSI.sub("", (self.out + " " + self.err).strip()).replace("\n", " | ")
        return s[:n]


def clean_env(**extra) -> dict:
    """The caller's environment, minus anything that would leak state between runs.
    PYTHONDONTWRITEBYTECODE is dropped: a user's machine writes bytecode, and a Python CLI
    that may not cache it measures the compiler (this applies to supervisor and runward)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RUNWARD_", "PM2_", "PEERBENCH_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def run(argv, env=None, cwd=None, timeout=120.0) -> Res:
    t = time.perf_counter()
    try:
        p = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
        return Res(p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"),
                   time.perf_counter() - t)
    except subprocess.TimeoutExpired as e:
        return Res(124, (e.stdout or b"").decode("utf-8", "replace"),
                   "timed out after %ss" % timeout, time.perf_counter() - t)


class Job:
    """One named job: argv, env (PEERBENCH_TAG included), settle seconds."""

    def __init__(self, name, argv, env, settle=1.0, cwd=None):
        self.name, self.argv, self.env, self.settle, self.cwd = name, list(argv), dict(env), settle, cwd


def q(s) -> str:
    return shlex.quote(str(s))


# --------------------------------------------------------------------------- the shell way
class Shell:
    key = "shell"
    label = "shell way"
    CONFIG = ("start: `pgrep -f PAT && exit 1` guard, then `nohup CMD > LOG 2>&1 & echo $! > PIDFILE; "
              "sleep 1; pgrep -f PAT` (PAT = the job script's unique path); stop: `pkill -f PAT; sleep 3; "
              "pkill -9 -f PAT`; status: `pgrep -f PAT` (N runs: `pgrep -F` per pid file in one bash loop); "
              "restart: stop then start; stale-pid scenario: `kill $(cat PIDFILE)`. Each idiom runs from a "
              "script file (`bash start.sh`), so the shell's own argv never holds PAT, except in the "
              "self-kill scenario, which is about exactly that.")

    def __init__(self, inst, d):
        self.inst, self.d = inst, d
        self.jobs = {}
        self.env = clean_env()
        os.makedirs(d, exist_ok=True)

    def pattern(self, name):
        j = self.jobs[name]
        return j.argv[1] if len(j.argv) > 1 else j.argv[0]

    def log(self, name):
        return os.path.join(self.d, name + ".log")

    def pidfile(self, name):
        return os.path.join(self.d, name + ".pid")

    def script(self, name, kind):
        return os.path.join(self.d, f"{kind}_{name}.sh")

    def setup(self, jobs):
        for j in jobs:
            self.jobs[j.name] = j
            pat = q(self.pattern(j.name))
            envs = " ".join(f"{k}={q(v)}" for k, v in j.env.items())
            cmd = " ".join(q(a) for a in j.argv)
            cd = f"cd {q(j.cwd or self.d)}\n"
            launch = f"{envs} nohup {cmd} > {q(self.log(j.name))} 2>&1 &\necho $! > {q(self.pidfile(j.name))}\n"
            guard = f"if pgrep -f {pat} >/dev/null; then echo 'already running' >&2; exit 1; fi\n"
            scripts = {
                "start": cd + guard + launch + f"sleep {j.settle:g}\npgrep -f {pat} >/dev/null\n",
                # the floor: the same without the fixed sleep, pgrep until it sees the job
                "start0": cd + guard + launch
                + f"for i in $(seq 5000); do pgrep -f {pat} >/dev/null && exit 0; done\nexit 1\n",
                "stop": f"pkill -f {pat}\nsleep {GRACE:g}\npkill -9 -f {pat}\nexit 0\n",
                "stop0": f"pkill -f {pat}\n",
                "killpid": f"kill $(cat {q(self.pidfile(j.name))})\n",
                "status": f"pgrep -f {pat}\n",
            }
            for kind, body in scripts.items():
                with open(self.script(j.name, kind), "w") as f:
                    f.write("#!/bin/bash\n" + body)

    def cmd(self, verb, name, floor=False):
        """(argv, env, cwd) of one verb; floor: the variant without the fixed sleep."""
        kind = {"start": "start0", "stop": "stop0"}.get(verb, verb) if floor else verb
        return ["bash", self.script(name, kind)], clean_env(), self.d

    def inline_stop(self, name):
        """The stop idiom as typed on a command line (for the self-kill scenario)."""
        pat = q(self.pattern(name))
        return f"pkill -f {pat}; sleep {GRACE:g}; pkill -9 -f {pat}"

    def start(self, name, floor=False, own=False):
        return run(*self.cmd("start", name, floor))

    def started_ok(self, res):
        return res.rc == 0

    def stop(self, name, floor=False):
        return run(*self.cmd("stop", name, floor))

    def restart(self, name):
        a = self.stop(name)
        b = self.start(name)
        return Res(b.rc, a.out + b.out, a.err + b.err, a.dt + b.dt)

    def status(self, name):
        return run(*self.cmd("status", name))

    def exit_code(self, name):
        r = self.status(name)
        return None, f"`pgrep -f` exit {r.rc}, output {r.out.strip()!r}: nohup keeps no exit status"

    def log_files(self, name):
        return [self.log(name)]

    # N runs: pid files, pgrep -F for each
    def add_many(self, names, argv, env):
        d = os.path.join(self.d, "pids")
        os.makedirs(d, exist_ok=True)
        envs = " ".join(f"{k}={q(v)}" for k, v in env.items())
        lines = [f"cd {q(self.d)}"]
        for n in names:
            lines.append(f"{envs} nohup {' '.join(q(a) for a in argv)} > {q(os.path.join(d, n + '.log'))} 2>&1 &"
                         f" echo $! > {q(os.path.join(d, n + '.pid'))}")
        path = os.path.join(self.d, "add.sh")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        r = run(["bash", path], env=clean_env(), timeout=600)
        loop = ("  if pgrep -F \"$f\" >/dev/null; then echo \"$f running\"; else echo \"$f dead\"; fi\ndone\n")
        with open(os.path.join(self.d, "statusN.sh"), "w") as f:
            f.write(f"for f in {q(d)}/*.pid; do\n" + loop)
        # the same loop over the first K pid files only: for sizes where the full loop would take minutes
        with open(os.path.join(self.d, "statusK.sh"), "w") as f:
            f.write(f"for f in $(ls {q(d)}/*.pid | head -n \"$1\"); do\n" + loop)
        return r

    def status_many_argv(self, sample=None):
        if sample:
            return ["bash", os.path.join(self.d, "statusK.sh"), str(sample)]
        return ["bash", os.path.join(self.d, "statusN.sh")]

    def count_running(self, res):
        return res.out.count(" running")


# --------------------------------------------------------------------------- supervisord
class Supervisor:
    key = "supervisor"
    label = "supervisord"
    CONFIG = ("one supervisord per scenario, generated supervisord.conf; per program: "
              "`autostart=false autorestart=false startsecs=1 startretries=0 stopsignal=TERM "
              "stopwaitsecs=3 stopasgroup=true killasgroup=true redirect_stderr=true stdout_logfile=<file>`; "
              "start/stop/restart/status with `supervisorctl -c CONF`; the floor start uses a twin program with "
              "`startsecs=0`; N runs: N `[program:sI]` sections (`autostart=true startsecs=0`), added with "
              "`supervisorctl update`.")

    def __init__(self, inst, d):
        self.inst, self.d = inst, d
        self.conf = os.path.join(d, "supervisord.conf")
        self.sock = os.path.join(d, "supervisor.sock")
        self.programs = {}
        self.live = {}
        self.env = clean_env()
        self.started = False
        os.makedirs(d, exist_ok=True)

    def ctl(self, *args):
        return [self.inst.supervisorctl, "-c", self.conf] + list(args)

    def _program(self, name, argv, env, settle, autostart, cwd=None):
        envs = ",".join(f'{k}="{v}"' for k, v in env.items())
        return (f"[program:{name}]\ncommand={' '.join(q(a) for a in argv)}\ndirectory={cwd or self.d}\n"
                f"environment={envs}\nautostart={'true' if autostart else 'false'}\nautorestart=false\n"
                f"startsecs={settle:g}\nstartretries=0\nstopsignal=TERM\nstopwaitsecs={GRACE:g}\n"
                f"stopasgroup=true\nkillasgroup=true\nredirect_stderr=true\n"
                f"stdout_logfile={os.path.join(self.d, name + '.log')}\n")

    def _write(self):
        head = (f"[unix_http_server]\nfile={self.sock}\n[supervisord]\nlogfile={self.d}/supervisord.log\n"
                f"pidfile={self.d}/supervisord.pid\nchildlogdir={self.d}\n"
                f"[rpcinterface:supervisor]\n"
                f"supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n"
                f"[supervisorctl]\nserverurl=unix://{self.sock}\n")
        tmp = self.conf + ".tmp"
        with open(tmp, "w") as f:
            f.write(head + "".join(self.programs.values()))
        os.replace(tmp, self.conf)

    def _boot(self):
        self._write()
        r = run([self.inst.supervisord, "-c", self.conf], env=clean_env(), cwd=self.d)
        if r.rc != 0:
            raise RuntimeError("supervisord did not start: " + r.text())
        ok = procfs.wait_until(lambda: run(self.ctl("pid"), env=clean_env()).rc == 0, 15)
        if not ok:
            raise RuntimeError("supervisord socket did not answer")
        self.started = True

    def setup(self, jobs):
        for j in jobs:
            self.programs[j.name] = self._program(j.name, j.argv, j.env, j.settle, False, j.cwd)
            # the floor twin: startsecs=0
            self.programs[j.name + "_0"] = self._program(j.name + "_0", j.argv, j.env, 0, False, j.cwd)
        self._boot()

    def cmd(self, verb, name, floor=False):
        if verb == "start":
            self.live[name] = name + "_0" if floor else name
            return self.ctl("start", self.live[name]), clean_env(), self.d
        if verb == "stop":  # stop the twin that was started last
            return self.ctl("stop", self.live.get(name, name)), clean_env(), self.d
        return self.ctl(verb, name), clean_env(), self.d

    def inline_stop(self, name):
        return " ".join(q(a) for a in self.cmd("stop", name)[0])

    def start(self, name, floor=False, own=False):
        return run(*self.cmd("start", name, floor))

    def started_ok(self, res):
        return res.rc == 0 and "started" in res.out

    def stop(self, name, floor=False):
        return run(*self.cmd("stop", name))

    def restart(self, name):
        return run(self.ctl("restart", name), env=clean_env())

    def status(self, name=None):
        return run(self.ctl("status", *([name] if name else [])), env=clean_env())

    def exit_code(self, name):
        r = self.status(name)
        # supervisorctl prints e.g. "j  EXITED  Dec 02 01:11 PM": a date, no exit status
        m = re.search(r"exit (?:status|code) (\d+)", r.out)
        code = int(m.group(1)) if m else None
        api = run([self.inst.sv_python, "-c",
                   "import sys,xmlrpc.client as x\nfrom supervisor.xmlrpc import SupervisorTransport as T\n"
                   "s=x.ServerProxy('http://127.0.0.1',transport=T(None,None,'unix://'+sys.argv[1]))\n"
                   "print(s.supervisor.getProcessInfo(sys.argv[2])['exitstatus'])", self.sock, name],
                  env=clean_env())
        return code, (f"`supervisorctl status` prints {' '.join(r.out.split())!r} (no exit status); "
                      f"the XML-RPC getProcessInfo().exitstatus holds {api.out.strip() or api.text()}")

    def log_files(self, name):
        return [os.path.join(self.d, name + ".log")]

    def add_many(self, names, argv, env):
        for n in names:
            self.programs[n] = self._program(n, argv, env, 0, True)
        if not self.started:
            self._boot()
            return Res(0, "", "", 0)
        self._write()
        return run(self.ctl("update"), env=clean_env(), timeout=600)

    def status_many_argv(self):
        return self.ctl("status")

    def count_running(self, res):
        return sum(1 for line in res.out.splitlines() if " RUNNING " in line)


# --------------------------------------------------------------------------- pm2
class PM2:
    key = "pm2"
    label = "pm2"
    CONFIG = ("one daemon per scenario, `PM2_HOME` in the scenario's directory; each job an app in an "
              "ecosystem JSON: `interpreter: none, autorestart: false, treekill: true, kill_timeout: 3000, "
              "out_file/error_file` in the scenario dir (pm2 sends SIGINT, then SIGKILL after kill_timeout); "
              "`pm2 start eco.json --only NAME`, `pm2 stop NAME`, `pm2 restart NAME`, status `pm2 jlist`. "
              "pm2 start does not wait: verified start = `pm2 start`, `sleep 1`, `pm2 jlist` shows "
              "`online` with 0 restarts; the floor is `pm2 start` alone. N runs: N apps, one ecosystem file.")

    def __init__(self, inst, d):
        self.inst, self.d = inst, d
        self.home = os.path.join(d, "pm2")
        self.eco = os.path.join(d, "eco.json")
        self.apps = {}
        self.env = clean_env(PM2_HOME=self.home)
        self.started = False
        os.makedirs(d, exist_ok=True)

    def _app(self, name, argv, env, cwd=None):
        return {"name": name, "script": argv[0], "args": argv[1:], "interpreter": "none",
                "cwd": cwd or self.d, "env": env, "autorestart": False, "treekill": True,
                "kill_timeout": int(GRACE * 1000),
                "out_file": os.path.join(self.d, name + "-out.log"),
                "error_file": os.path.join(self.d, name + "-err.log")}

    def _write(self, apps):
        with open(self.eco, "w") as f:
            json.dump({"apps": apps}, f)

    def _boot(self):
        r = run(self.pm2("ping"), env=self.env)
        if r.rc != 0:
            raise RuntimeError("pm2 daemon did not start: " + r.text())
        self.started = True

    def setup(self, jobs):
        for j in jobs:
            self.apps[j.name] = self._app(j.name, j.argv, j.env, j.cwd)
        self._write(list(self.apps.values()))
        self._boot()

    def pm2(self, *args):
        return [self.inst.pm2] + list(args)

    def cmd(self, verb, name, floor=False):
        if verb == "start":
            return self.pm2("start", self.eco, "--only", name), self.env, self.d
        return self.pm2(verb, name), self.env, self.d

    def inline_stop(self, name):
        return f"PM2_HOME={q(self.home)} " + " ".join(q(a) for a in self.cmd("stop", name)[0])

    def jlist(self):
        r = run(self.pm2("jlist"), env=self.env)
        try:
            return json.loads(r.out[r.out.index("["):]) if "[" in r.out else []
        except ValueError:
            return []

    def app(self, name):
        for a in self.jlist():
            if a.get("name") == name:
                return a
        return None

    def start(self, name, floor=False, own=False):
        r = run(*self.cmd("start", name))
        if floor or own or r.rc != 0:
            return r
        # pm2 start returns before anything is known: a careful user looks again after 1 s
        t = time.perf_counter()
        time.sleep(1.0)
        a = self.app(name)
        ok = bool(a) and a["pm2_env"].get("status") == "online" and not a["pm2_env"].get("restart_time")
        dt = r.dt + time.perf_counter() - t
        return Res(0 if ok else 1, r.out + ("\nverified online" if ok else "\nnot online"), r.err, dt)

    def started_ok(self, res):
        return res.rc == 0

    def stop(self, name, floor=False):
        return run(*self.cmd("stop", name))

    def restart(self, name):
        return run(*self.cmd("restart", name))

    def status(self, name=None):
        return run(self.pm2("jlist"), env=self.env)

    def exit_code(self, name):
        a = self.app(name)
        if not a:
            return None, "app not in `pm2 jlist`"
        e = a["pm2_env"]
        return e.get("exit_code"), f"`pm2 jlist`: status {e.get('status')}, exit_code {e.get('exit_code')}"

    def log_files(self, name):
        return [os.path.join(self.d, name + "-out.log")]

    def pidfile(self, name):
        a = self.app(name)
        pm_id = a["pm_id"] if a else 0
        return os.path.join(self.home, "pids", f"{name}-{pm_id}.pid")

    def add_many(self, names, argv, env):
        if not self.started:
            self._boot()
        apps = [self._app(n, argv, env) for n in names]
        for a in apps:
            self.apps[a["name"]] = a
        path = os.path.join(self.d, f"eco-add-{len(self.apps)}.json")
        with open(path, "w") as f:
            json.dump({"apps": apps}, f)
        return run(self.pm2("start", path), env=self.env, timeout=900)

    def status_many_argv(self):
        return self.pm2("jlist")

    def count_running(self, res):
        try:
            return sum(1 for a in json.loads(res.out[res.out.index("["):])
                       if a["pm2_env"].get("status") == "online")
        except ValueError:
            return 0


# --------------------------------------------------------------------------- runward
class Runward:
    key = "runward"
    label = "runward"
    CONFIG = ("`RUNWARD_HOME` in the scenario's directory; `runward start NAME --settle 1 --grace 3 --json "
              "--cwd DIR --env K=V... -- CMD`, `runward stop NAME --grace 3 --json`, `runward restart NAME "
              "--json`, `runward status --json`; the floor start is `--settle 0`. Run names carry a per-bench "
              "prefix (runward's cgroup and marker names are per machine, not per RUNWARD_HOME). N runs "
              "for the status figure are started through runward's Python API (`api.start`, "
              "settle 0), 8 at a time: set-up only, not measured.")

    def __init__(self, inst, d, prefix=""):
        self.inst, self.d, self.prefix = inst, d, prefix
        self.home = os.path.join(d, "rwhome")
        self.env = clean_env(RUNWARD_HOME=self.home)
        self.jobs = {}
        os.makedirs(d, exist_ok=True)

    def rn(self, name):
        return self.prefix + name

    def setup(self, jobs):
        for j in jobs:
            self.jobs[j.name] = j

    def cmd(self, verb, name, floor=False):
        return self.argv(verb, name, floor), self.env, self.d

    def inline_stop(self, name):
        return f"RUNWARD_HOME={q(self.home)} " + " ".join(q(a) for a in self.argv("stop", name))

    def argv(self, verb, name, floor=False):
        rw = self.inst.runward
        if verb == "start":
            j = self.jobs[name]
            a = [rw, "start", self.rn(name), "--settle", "0" if floor else f"{j.settle:g}",
                 "--grace", f"{GRACE:g}", "--json", "--cwd", j.cwd or self.d]
            for k, v in j.env.items():
                a += ["--env", f"{k}={v}"]
            return a + ["--"] + j.argv
        if verb == "stop":
            return [rw, "stop", self.rn(name), "--grace", f"{GRACE:g}", "--json"]
        if verb == "restart":
            return [rw, "restart", self.rn(name), "--json"]
        return [rw, "status", "--json"]

    def start(self, name, floor=False, own=False):
        return run(*self.cmd("start", name, floor))

    def started_ok(self, res):
        return res.rc == 0

    def stop(self, name, floor=False):
        return run(*self.cmd("stop", name))

    def restart(self, name):
        return run(self.argv("restart", name), env=self.env, cwd=self.d)

    def status(self, name=None):
        return run(self.argv("status", name), env=self.env, cwd=self.d)

    def status_json(self):
        r = self.status()
        try:
            return json.loads(r.out)
        except ValueError:
            return {}

    def run_status(self, name):
        for x in self.status_json().get("result", {}).get("runs", []):
            if x.get("name") == self.rn(name):
                return x
        return None

    def exit_code(self, name):
        x = self.run_status(name)
        if not x:
            return None, "run not in `runward status --json`"
        ex = x.get("exit") or {}
        return ex.get("code"), f"`runward status --json`: state {x.get('state')}, exit {ex}"

    def log_files(self, name):
        return [os.path.join(self.home, "runs", self.rn(name), "log")]

    def attempt_file(self, name):
        d = os.path.join(self.home, "runs", self.rn(name))
        with open(os.path.join(d, "run.json")) as f:
            n = json.load(f)["attempt"]
        return os.path.join(d, "attempts", f"{n}.json")

    def add_many(self, names, argv, env):
        helper = (
            "import sys, json\nfrom concurrent.futures import ThreadPoolExecutor\n"
            "from runward import api\nfrom runward.targets import Target\n"
            "names, argv, env = json.loads(sys.stdin.read())\n"
            "def go(n):\n"
            "    try:\n"
            "        api.start(Target(()), n, argv=argv, env=env, settle=0)\n"
            "        return 1\n"
            "    except Exception as e:\n"
            "        print(n, e, file=sys.stderr); return 0\n"
            "with ThreadPoolExecutor(8) as ex:\n"
            "    print(sum(ex.map(go, names)))\n")
        t = time.perf_counter()
        p = subprocess.run([self.inst.runward_python, "-c", helper], env=self.env, cwd=self.d,
                           input=json.dumps([[self.rn(n) for n in names], argv, env]).encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900)
        return Res(p.returncode, p.stdout.decode(), p.stderr.decode()[-2000:], time.perf_counter() - t)

    def status_many_argv(self):
        return self.argv("status", None)

    def count_running(self, res):
        try:
            return sum(1 for x in json.loads(res.out)["result"]["runs"] if x.get("state") == "running")
        except (ValueError, KeyError):
            return 0


TOOLS = [Shell, Supervisor, PM2, Runward]
