"""The oracle's world: the target kinds it drives, the session's directories and
runward.toml, and runward itself, reached only through its CLI with --json, as a user
reaches it. Nothing here imports runward."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import testbed

from . import ray, seams, truth

ROOT = Path(__file__).resolve().parent.parent.parent
JOB = Path(__file__).resolve().parent / "job.py"

# kind -> (the `on` of its runward.toml target, the testbed feature it needs)
KINDS = {
    "local": ("local", None),
    "user": ("local", None),       # local as an ordinary user: no cgroup of its own
    "ssh": ("ssh://rw1", "ssh"),
    "link": ("ssh://rworacle-link", "ssh"),   # rw1 through the session's own relay (link.py)
    "podown": ("podman:rworacle-SESSION", "podman"),   # a container of the session's own (its stop)
    "podman": ("ssh://rw1/podman:rwpod", "podman"),
    "pct": ("ssh://rw1/pct:200", "pct"),
    "mn": (None, "ssh"),           # one run over two ssh hosts (rw1, rw2): nodes mn0, mn1
    "mnct": (None, "pct"),         # one run over two filesystems: podman (mnct0) and LXC (mnct1)
    "alias": ("ssh://rworacle-alias", "ssh"),   # an alias the walker re-points between rw1 and rw2 (seams.py)
    "pctw": ("pct:200", "pct"),    # pct through the session's own stand-in, which the walker wedges (seams.py)
    "ray": (ray.ON, None),         # the head of scripts/ray-testbed's cluster, the CLI in its namespace (ray.py)
}
# a multi-node kind's nodes: (target name in runward.toml, its `on`, the container kind or None)
NODES = {
    "mn": (("mn0", "ssh://rw1", None), ("mn1", "ssh://rw2", None)),
    "mnct": (("mnct0", "ssh://rw1/podman:rwpod", "podman"), ("mnct1", "ssh://rw1/pct:200", "pct")),
}


@dataclass
class Target:
    kind: str
    on: str
    home: str     # runward's state there, as the target's agent sees it
    app: str      # where the jobs' code is deployed, in the target's filesystem
    root: str     # the target's filesystem root, as a path on this machine
    pidns: str    # the target's pid namespace (readlink /proc/PID/ns/pid)
    spec_app: str = ""   # app as runward.toml names it, where not app itself (relative to the far home)

    def host_path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))


def _container_init(kind: str, tb: dict, name: str = "") -> int:
    """The host pid of the container's pid 1: its /proc/PID/root is the container's
    filesystem and its ns/pid the container's pid namespace."""
    if kind == "podman":
        argv = ["podman", "inspect", "-f", "{{.State.Pid}}", name or tb["podman"]]
    else:
        argv = ["lxc-info", "-n", tb["lxc"], "-p", "-H"]
    out = subprocess.run(argv, env=testbed.env(tb), capture_output=True, text=True, timeout=60)
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        raise RuntimeError("cannot find the %s container's init: %s %s" % (kind, out.stdout, out.stderr))
    return int(out.stdout.strip())


def why_not(kind: str) -> str | None:
    """None when the kind can run here, else why not (the reason a test skips with)."""
    if kind not in KINDS:
        return "unknown target kind %r (known: %s)" % (kind, ", ".join(KINDS))
    if os.geteuid() != 0:
        return "the oracle's %s kind needs root (cgroups; testbed)" % kind
    feature = KINDS[kind][1]
    if kind == "user" and not os.access("/usr/bin/python3", os.X_OK):
        return "the oracle's user kind needs /usr/bin/python3 for the ordinary user"
    if kind == "ray":
        return ray.why_not()
    if feature is None:
        return None
    tb = testbed.load()
    if tb is None:
        return testbed.NOT_UP
    for f in (feature, "podman") if kind == "mnct" else (feature,):
        if not tb.get(testbed.FEATURES[f]):
            return "the testbed has no %s" % f
    return None


USER = "rworacle"  # the user kind's own user: other tests' `pkill -u` never hits its runs


def ordinary_user():
    """(uid, gid) of the user kind's ordinary user, made once (root only: why_not says so)."""
    import pwd
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", USER], check=True)
        pw = pwd.getpwnam(USER)
    return pw.pw_uid, pw.pw_gid


class Session:
    """One oracle session: a scratch directory, one runward home here, one far home per
    target (unique, so other users of the testbed are never touched), and runward.toml."""

    def __init__(self, kinds: list[str]):
        self.id = uuid.uuid4().hex[:8]
        self.dir = Path(tempfile.mkdtemp(prefix="oracle-%s-" % self.id))
        self.home = self.dir / "home"
        self.work = self.dir / "work"
        self.work.mkdir()
        self.tb = testbed.load()
        self.user_base = None
        if "user" in kinds:   # its home and code in a directory of its own, 0700, its own
            self.uid, self.gid = ordinary_user()
            self.user_base = Path("/tmp/oracle-%s-user" % self.id)
            self.user_base.mkdir(mode=0o700)
            os.chown(self.user_base, self.uid, self.gid)
            os.chmod(self.dir, 0o755)   # runward.toml and the local code: readable by that user
            os.chmod(self.work, 0o755)
        self.alias_host = "rw1"   # where the alias kind's alias names now (seams.repoint flips it)
        self.alias_targets: dict = {}
        if "alias" in kinds:
            self.alias_targets = seams.alias_targets(self)
        self.container = None
        if "podown" in kinds:   # made from the testbed's image as rwpod is, removed at the end
            self.container = "rworacle-%s" % self.id
            self.podman("run", "-d", "--name", self.container, "--hostname", self.container, "--init",
                        "--network", "none", self.podman("inspect", "-f", "{{.ImageName}}", self.tb["podman"]),
                        "sleep", "infinity")
        if "ray" in kinds:   # failures after a restart of the shared cluster are the harness's (ray.restarted)
            ray.SEEN_AT["at"] = ray.restarts()
        else:
            ray.SEEN_AT.clear()
        self.targets = {}
        for k in kinds:
            for name, on, ct in NODES.get(k, ((k, KINDS[k][0], None),)):
                self.targets[name] = self._node(name, on, ct) if k in NODES else self._target(k)
        self.runs_toml: dict[str, str] = {}
        self.env = testbed.env(self.tb) if self.tb else dict(os.environ)
        self.env.update(RUNWARD_HOME=str(self.home), PYTHONPATH=str(ROOT / "src"),
                        RUNWARD_RESIDENT_IDLE="30")
        self.env.pop("RUNWARD_CONFIG", None)
        if self.tb:
            self.env["RUNWARD_SSH_CONFIG"] = self.tb["ssh_config"]
        self.relay = None
        if "link" in kinds:   # the link kind: rw1's sshd through a relay this session may cut
            from . import link
            self.relay = link.Relay((self.tb["addresses"]["rw1"], 22))
        if "link" in kinds or "alias" in kinds:
            self.write_ssh_config()
            self.env["RUNWARD_SSH_CONFIG"] = str(self.dir / "ssh_config")
        if "pctw" in kinds:   # its stand-in first on PATH: pct, or a hung one while wedged
            self.env["PATH"] = "%s:%s" % (seams.wedgeable_pct(self), self.env["PATH"])

    def _target(self, kind: str) -> Target:
        on = KINDS[kind][0]
        far = "/tmp/oracle-%s" % self.id
        if kind == "user":
            b = str(self.user_base)
            return Target(kind, on, b + "/home", b + "/app", "/", os.readlink("/proc/self/ns/pid"))
        if kind == "local":
            return Target(kind, on, str(self.home), str(self.dir / "app"), "/", os.readlink("/proc/self/ns/pid"))
        if kind == "ray":   # ray://local: the agent on the head is this machine's, with the CLI's home
            return Target(kind, on, str(self.home), str(self.dir / "app-ray"), "/", os.readlink("/proc/self/ns/pid"))
        if kind == "alias":
            return self.alias_targets[self.alias_host]
        if kind == "podown":
            t = Target(kind, "podman:" + self.container, far + "/far", far + "/app", "", "")
            self.refresh(t)
            return t
        if kind in ("ssh", "link"):
            return Target(kind, on, "%s/far-%s" % (far, kind), "%s/app-%s" % (far, kind), "/",
                          os.readlink("/proc/self/ns/pid"))
        init = _container_init(kind, self.tb)
        return Target(kind, on, far + "/far", far + "/app", "/proc/%d/root" % init,
                      os.readlink("/proc/%d/ns/pid" % init))

    def _node(self, name: str, on: str, ct: str | None) -> Target:
        """One node of a multi-node kind: a home of its own; the code at one path on every node
        (runward.toml's `files` is one list), in each node's own filesystem."""
        far = "/tmp/oracle-%s" % self.id
        kind = name.rstrip("0123456789")
        if ct is None:
            return Target(kind, on, "%s/far-%s" % (far, name), far + "/app-" + kind, "/",
                          os.readlink("/proc/self/ns/pid"))
        init = _container_init(ct, self.tb)
        return Target(kind, on, "%s/far-%s" % (far, name), far + "/app-" + kind, "/proc/%d/root" % init,
                      os.readlink("/proc/%d/ns/pid" % init))

    def write_ssh_config(self):
        """The testbed's ssh_config, then the session's own hosts: the link kind's relay and the
        alias kind's alias as it names now (rewritten in place, as a person edits it)."""
        from . import link
        text = link.ssh_config(self.tb, self.relay.port) if self.relay else "Include %s\n" % self.tb["ssh_config"]
        with open(self.dir / "ssh_config", "r+" if (self.dir / "ssh_config").exists() else "w") as f:
            f.write(text + (seams.alias_config(self.tb, self.alias_host) if self.alias_targets else ""))
            f.truncate()

    def podman(self, *args: str, check: bool = True) -> str:
        p = subprocess.run(["podman", *args], env=testbed.env(self.tb), capture_output=True, text=True, timeout=120)
        if check and p.returncode != 0:
            raise RuntimeError("podman %s: %s" % (" ".join(args), p.stderr[-500:]))
        return p.stdout.strip()

    def refresh(self, t: Target):
        """The session's container's root and pid namespace, found again (a new init after a
        restart of the container)."""
        init = _container_init("podman", self.tb, self.container)
        t.root, t.pidns = "/proc/%d/root" % init, os.readlink("/proc/%d/ns/pid" % init)

    def write_toml(self):
        parts = []
        for k, t in self.targets.items():
            parts.append('[targets.%s]\non = "%s"\n' % (k, t.on))
            if k == "alias":   # its home is the HOME its python wrapper gives on the host it runs on
                parts.append('python = "%s"\n' % seams.ALIAS_PYTHON.format(id=self.id))
            elif k not in ("local", "user", "ray"):
                parts.append('home = "%s"\npython = "/usr/bin/python3"\n' % t.home)
        parts.extend(self.runs_toml.values())
        (self.work / "runward.toml").write_text("\n".join(parts))

    def how(self, kind: str = "") -> tuple[list, dict, dict]:
        """(argv head, env, subprocess options) of runward's CLI as a user runs it; for the user
        kind's runs, as that ordinary user, with a home of its own; for the ray kind's, on the
        head: inside the cluster's network namespace."""
        if kind == "ray":
            return ray.argv_head(), self.env, {}
        if kind != "user":
            return [sys.executable, "-m", "runward"], self.env, {}
        env = {"PATH": "/usr/bin:/bin", "RUNWARD_HOME": self.targets["user"].home, "LANG": "C.UTF-8",
               "PYTHONPATH": str(ROOT / "src"), "HOME": str(self.user_base), "RUNWARD_RESIDENT_IDLE": "30",
               "PYTHONDONTWRITEBYTECODE": "1"}
        return ["/usr/bin/python3", "-m", "runward"], env, dict(user=self.uid, group=self.gid, extra_groups=[])

    def cli(self, *args: str, kind: str = "", timeout: float = 180) -> tuple[int, dict]:
        """runward ARGS --json, as a user runs it: (exit code, its one JSON document)."""
        head, env, extra = self.how(kind)
        p = subprocess.run([*head, *args, "--json"], cwd=self.work, env=env, capture_output=True, text=True,
                           timeout=timeout, **extra)
        return p.returncode, self.doc(p.stdout, p.stderr)

    @staticmethod
    def doc(stdout: str, stderr: str) -> dict:
        try:
            return json.loads(stdout)
        except ValueError:
            return {"not_json": stdout[-2000:], "stderr": stderr[-2000:]}

    def popen(self, *args: str, kind: str = "", json_out: bool = True) -> subprocess.Popen:
        """runward ARGS started, not waited for (a follow to interrupt, two verbs at once)."""
        head, env, extra = self.how(kind)
        return subprocess.Popen([*head, *args, *(["--json"] if json_out else [])], cwd=self.work, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **extra)

    def cleanup(self, tokens: list[str]):
        """Kill what the session's jobs left (by token, pid and start time), remove its files."""
        # the shims first: a shim that outlives its job records the end, and its run lock
        # would make the run directory again after the rmtree below
        homes = [t.home + "/runs/" for t in [*self.targets.values(), *self.alias_targets.values()]]
        truth.kill_procs([p for p in truth.scan(("runward-shim",), ("runward-shim",))
                          if any(fd.startswith(h) for fd in p.fds for h in homes)])
        truth.kill_tokens(tokens)
        if self.relay:
            self.relay.close()
        if self.container:
            self.podman("rm", "-f", "-t", "0", self.container, check=False)
        # the session's ssh control masters: their socket is in its home, about to be removed
        dirs = [str(self.dir)] + ([str(self.user_base)] if self.user_base else [])
        truth.kill_procs([p for p in truth.scan(("[mux]",)) if any(d in p.cmdline for d in dirs)])
        if self.user_base:
            shutil.rmtree(self.user_base, ignore_errors=True)
        # this machine's /tmp/oracle-ID too: where a misdirected deploy (issue 25 item 9) writes
        shutil.rmtree("/tmp/oracle-%s" % self.id, ignore_errors=True)
        for t in self.targets.values():
            if t.kind not in ("local", "user", "ray"):
                shutil.rmtree(t.host_path("/tmp/oracle-%s" % self.id), ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)
