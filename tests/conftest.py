"""Shared fixtures: an isolated runward home per test, a CLI runner, and /proc ground truth.

Everything here runs real processes; nothing about /proc is mocked."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train.py"

# Ctrl-C is the default in every process the tests start: a suite launched as a background job
# (`cmd &` in a script, some CI runners) inherits SIGINT ignored, exec keeps it ignored, and every
# test that interrupts a verb with SIGINT would then wait on a CLI that never sees it. A handler
# (not SIG_IGN) is reset to the default at each exec.
signal.signal(signal.SIGINT, signal.default_int_handler)
# Likewise SIGHUP under `nohup` (a suite started so): ignored, it stays ignored in every CLI the
# tests start, which then rightly keeps running through a hangup (cli.py), and a test of the
# hangup sees no hangup. A handler that does nothing keeps this process deaf to it, and each
# exec'd child gets the default.
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda signum, frame: None)
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
# an xdist worker (scripts/test's parallel step) is given COLUMNS=80 and LINES=24 by its
# gateway; every CLI a test starts would take them for its terminal's size (runward top in a
# 200-column tmux pane drew 80 columns), where a suite run alone has neither
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


class CLI:
    def __init__(self, home: Path, cwd: Path):
        self.home = home
        self.cwd = cwd
        self.env = dict(os.environ, RUNWARD_HOME=str(home), PYTHONPATH=str(ROOT / "src"))
        self.env.pop("RUNWARD_CONFIG", None)

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runward", *args]

    def run(self, *args: str, timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args), cwd=self.cwd, env=self.env, capture_output=True, text=True,
                              timeout=timeout, input=input)

    def json(self, *args: str, timeout: float = 120) -> tuple[int, dict]:
        args = list(args)
        args.insert(args.index("--") if "--" in args else len(args), "--json")
        p = self.run(*args, timeout=timeout)
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            raise AssertionError(f"not one JSON document: rc={p.returncode}\nstdout={p.stdout!r}\nstderr={p.stderr}")
        return p.returncode, doc

    def popen(self, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*args), cwd=self.cwd, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kw)

    def status(self, name: str) -> dict:
        rc, doc = self.json("status", name)
        assert rc == 0, doc
        return doc["result"]["runs"][0]


def read_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a pid, or None if gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    return rest[0], int(rest[19])


def alive(pid: int, start: int | None = None) -> bool:
    st = read_stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return False
    return start is None or st[1] == start


def home_ids(uid: int, homes) -> set[bytes]:
    """The RUNWARD_HOME_ID a run of each of these homes carries when run as uid (store.Home.id)."""
    return {hashlib.sha1(f"{uid}:{os.path.abspath(h)}".encode()).hexdigest()[:10].encode() for h in homes}


# under xdist (scripts/test's parallel step) each worker runs a test at a time, and a local run's
# processes carry the worker's PYTEST_XDIST_WORKER from the CLI's environment: one that carries
# another worker's is another test's, whatever its run's name
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_OTHER_WORKER = re.compile(rb"\0PYTEST_XDIST_WORKER=(?!" + re.escape(_WORKER.encode()) + rb"\0)") if _WORKER else None


def marked(*prefixes: str, homes=None) -> dict[int, int]:
    """Ground truth from /proc: pid -> start of every live process whose RUNWARD_RUN starts with
    one of the prefixes (one pass over /proc for all of them). homes: only those whose
    RUNWARD_HOME_ID is one of these homes' (or that carry none): run names like "w" recur
    across tests, and a suite run in parallel (docs/testing.md) has another test's "w" alive."""
    # one search in C per process, not a loop over its items: an ssh master's retitled
    # environ reads as thousands of empty items, and a suite keeps dozens of masters alive
    needles = [b"\0RUNWARD_RUN=" + prefix.encode() for prefix in prefixes]
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = b"\0" + f.read()
        except OSError:
            continue
        if any(needle in env for needle in needles):
            if _OTHER_WORKER and _OTHER_WORKER.search(env):
                continue
            if homes is not None and not _of_homes(int(d), env, homes):
                continue
            st = read_stat(int(d))
            if st and st[0] not in ("Z", "X"):
                out[int(d)] = st[1]
    return out


def _of_homes(pid: int, env: bytes, homes) -> bool:
    at = env.find(b"\0RUNWARD_HOME_ID=")
    if at < 0:
        return True
    value = env[at + len(b"\0RUNWARD_HOME_ID="):].split(b"\0", 1)[0]
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return False
    # root in a container whose uids are mapped reads as another uid here
    return value in home_ids(uid, homes) | home_ids(0, homes)


def homes_of(cli: "CLI") -> list[str]:
    """The homes a test's runs can have on this machine's filesystem: its own, and each
    `home = "..."` of its runward.toml (the testbed's ssh hosts share this filesystem)."""
    homes = [str(cli.home)]
    toml = cli.cwd / "runward.toml"
    try:
        homes += re.findall(r'^\s*home\s*=\s*"([^"~$]+)"', toml.read_text(), re.M)
    except OSError:
        pass
    return homes


def gate(path: Path) -> str:
    """A shell loop holding a job until PATH exists. A job meant to end by itself after its
    start answered ends when the test touches PATH, not after a sleep that a loaded machine
    can outlast within the settle period (then the start says "exited early")."""
    return f"until [ -e '{path}' ]; do sleep 0.02; done"


def wait_for(cond, timeout: float = 20.0, what: str = "condition"):
    """Wait on a real condition (bounded), polling; returns its value or fails the test."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)


@pytest.fixture(autouse=True)
def _hidden_env_per_test():
    """targets/sshconf.HIDDEN_ENV is this process's (a library caller's `env` names taken from
    its environment stay out of every later child, and keep local status spawned): one test's
    names would change another's in the same worker (xdist runs many in one process)."""
    yield
    sshconf = sys.modules.get("runward.targets.sshconf")
    if sshconf is not None:
        sshconf.HIDDEN_ENV.clear()


@pytest.fixture
def cli(tmp_path):
    home = tmp_path / "home"
    work = tmp_path / "work"
    work.mkdir()
    c = CLI(home, work)
    yield c
    # cleanup: anything still marked by this home's runs is killed by pid+start (one pass over
    # /proc for them all: a test may leave hundreds of runs)
    names = [n + "." for n in os.listdir(home / "runs") if not n.startswith(".")] if (home / "runs").is_dir() else []
    for pid, start in (marked(*names, homes=homes_of(c)) if names else {}).items():
        if alive(pid, start):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def lib(cli, monkeypatch):
    """runward's API (`import runward`) in this process, on the test's home, from its work
    directory: the operations-layer tests hold its documents to the CLI's."""
    monkeypatch.setenv("RUNWARD_HOME", str(cli.home))
    monkeypatch.chdir(cli.cwd)
    import runward
    return runward


@pytest.fixture
def no_verb(monkeypatch):
    """no_verb("doctor"): runward.verbs.doctor cannot be imported in this process, so the
    library's answer comes from the operation itself, not from the verb run with argv."""
    def hide(verb: str) -> None:
        monkeypatch.setitem(sys.modules, f"runward.verbs.{verb}", None)
    return hide


_SRC_COPY: list = []


def world_readable_src() -> str:
    """src/ as another user can read it, for tests that run runward as an ordinary user (or
    nobody): CI's checkout may sit under a 0700 home. A copy under /tmp, 0755/0644, made
    once per session."""
    if not _SRC_COPY:
        import atexit
        import shutil
        import tempfile
        base = tempfile.mkdtemp(prefix="runward-src-")
        dest = os.path.join(base, "src")
        shutil.copytree(ROOT / "src", dest, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        for d, dirs, files in os.walk(base):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        atexit.register(shutil.rmtree, base, True)
        _SRC_COPY.append(dest)
    return _SRC_COPY[0]


def kill_procs(procs: dict[int, int]) -> None:
    """SIGKILL the test's own processes, each by pid and start time (/proc), should a verdict
    fail midway: a pid reused since is never signalled."""
    for pid, start in procs.items():
        if alive(pid, start):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def env_flags(*items: str) -> list[str]:
    """`--env K=V` for each item."""
    return [a for kv in items for a in ("--env", kv)]


def exited_attempt(cli: CLI, name: str, attempt: int) -> dict:
    """NAME's status once its attempt ATTEMPT has exited."""
    def done():
        st = cli.status(name)
        return st if st["attempt"] == attempt and st["state"] == "exited" else None
    return wait_for(done, timeout=60, what=f"attempt {attempt} of {name} to exit")


def attempt_record(cli: CLI, name: str, n: int = 1) -> dict:
    """Attempt N's record of NAME as the shim wrote it, or {} while it is missing or half-read."""
    p = cli.home / "runs" / name / "attempts" / f"{n}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return {}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fresh_name(prefix: str) -> str:
    """A run name no other test uses."""
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def nothing_started(cli: CLI, name: str) -> None:
    """A refused start of NAME left no process with its marker and no attempt record."""
    assert not marked(name + "."), f"a refused start of {name} started something"
    assert not (cli.home / "runs" / name / "attempts" / "1.json").exists(), f"a refused start of {name} left a record"


# --- parallel runs (docs/testing.md "Running the suite in parallel") -------------------------
# scripts/test runs the suite in two phases: `-m "not serial"` over several xdist workers, then
# `-m serial` alone, one test at a time. A file is here when one of its tests changes state that
# other tests share (the testbed's hosts and links, the one Slurm, the one Ray cluster, a
# user's processes), or when its verdict reads state that another running test changes (every
# process of a kind, the next pids, the machine's load). The reason says which.
SERIAL = {
    # the one Ray cluster (scripts/ray-testbed): also `ray` below, run under the cluster's lock
    "test_ray.py": "the one Ray cluster: restarts its head, kills its second node",
    "test_ray_stop.py": "the one Ray cluster: its jobs, and every process of a driver's session",
    "test_ray_workers.py": "the one Ray cluster: adds a node of its own to it",
    "test_ray_ssh.py": "the one Ray cluster, through the sshd in its namespace; adds a node of its own to it",
    "test_ray_nodes.py": "the one Ray cluster: adds a node of its own to it, stops through its sshd",
    "test_engine_log_rotation.py": "the one Ray cluster and the one Slurm",
    # the one Slurm (scripts/slurm-testbed): its queue and its node's slots
    "test_slurm.py": "the one Slurm: its queue, its node's slots",
    "test_slurm_state_now.py": "the one Slurm: the state of its jobs now",
    "test_history_slurm.py": "the one Slurm: its accounting",
    "test_rm_prune.py": "the one Slurm: a job left in its queue",
    "test_stop_checkpoint_nodes.py": "the one Slurm: its queue",
    # the testbed's hosts, shared by every test that reaches them
    "test_multinode_partition.py": "iptables rules in rw2's network namespace (a partition)",
    "test_gatebarrier_stop.py": "iptables rules in rw2's network namespace (a node cut)",
    "test_restart_gate_barrier.py": "cuts a node (rw2's network namespace)",
    "test_hop_diagnosis.py": "times hop bounds of 2 s; a probe's end is read as its call returns",
    "test_follow_leak.py": "counts every agent new in rwpod's pid namespace during a follow",
    "test_testbed.py": "times the slow hosts' added delay; walks rwlxc's pid namespace",
    "test_oracle.py": "its walks time wedged hops against a 1 s bound and read every process of a kind",
    # a verdict that the machine's load or other tests' forks change
    "test_link_loss.py": "times a silent link's notice (< 17.5 s of a 15 s alive timeout)",
    "test_planted_links.py": "plants links under the next pids (/proc/loadavg): other tests' forks take them",
    "test_fake_nvidia_smi.py": "times the stand-in's 1 s release delay from a process's death",
    # single tests (FILE::TEST, every parametrization): each failed in the parallel step of a
    # full run at load 9-10 and passed alone
    "test_library_logs_watch.py::test_watch_of_nodes_says_health_on_stdout_and_an_alert_on_stderr":
        "reads `healthy for 1s` of each node of a 1 s watch: load adds a second",
    "test_restart_gate.py::test_a_stop_as_the_gpu_is_released_cancels_the_blocked_restart_at_once":
        "a stop timed against the GPU's release delay",
    "test_refusals_agree.py::test_a_run_whose_table_says_settle_minus_1_stops_alone_and_restart_refuses":
        "takes the run's marked processes right after its start: under load more than the job's",
    "test_restart_code.py::test_restart_compares_files_never_deployed_with_the_targets_copy":
        "takes the run's marked processes right after its start: under load more than the job's",
}
# files and tests that touch the one Ray cluster: scripts/test runs them after the other serial
# ones, under RUNWARD_RAY_LOCK where set (a cluster shared with more than this suite)
RAY = {"test_ray.py", "test_ray_stop.py", "test_ray_workers.py", "test_ray_ssh.py", "test_ray_nodes.py",
       "test_engine_log_rotation.py",
       "test_oracle.py::test_oracle_ci_profile[ray]"}


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: changes or reads state other tests share; scripts/test "
                                       "runs it alone, after the parallel phase (tests/conftest.py SERIAL)")
    config.addinivalue_line("markers", "ray: uses the one Ray cluster; scripts/test runs it last, under "
                                       "RUNWARD_RAY_LOCK where set")


def pytest_collection_modifyitems(config, items):
    for item in items:
        base = item.path.name
        if base in SERIAL or f"{base}::{item.originalname}" in SERIAL:
            item.add_marker(pytest.mark.serial)
        if base in RAY or f"{base}::{item.name}" in RAY:
            item.add_marker(pytest.mark.ray)
