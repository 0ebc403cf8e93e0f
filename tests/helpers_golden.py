"""Golden --json documents (tests/golden): check() holds a document to its golden file, and the
runs the goldens are taken of (start, stepped, restarted, a deploy config), shared by the CLI's
and the library's golden tests."""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLE, wait_for


GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("RUNWARD_GOLDEN_UPDATE") == "1"
JOB = "rwgolden_train.py"  # the example job's copy: a file name no other test's process carries
ENV = ["--env", "TRAIN_STEP_SECONDS=0.1", "--env", "TRAIN_SEED=0"]

# Values that change from one run to the next, whatever their key's place: replaced by their
# type's marker. Everything not listed is compared as it is.
VOLATILE = {
    "pid", "pids", "start", "start_time", "started_at", "ended_at", "mtime", "time", "size", "offset",
    "waited_s", "ran_s", "uptime_s", "cpu_seconds", "rss_bytes", "pss_bytes", "steps", "points",
    "warmup_points", "median", "last", "metrics", "throughput_series", "step", "loss", "tok_s",
    "host", "kernel", "boot_id", "python", "executable", "clock_skew_s", "clock_skew_uncertainty_s",
    "round_trip_s", "zombies", "zombie_comms", "pidns", "duration_s", "elapsed_s", "age_s", "ts",
    "init_pid", "worker_pids", "stall_after_rule", "escapee_pid", "last_step_at", "silent_s", "since", "window_s",
    "step_time_s", "seconds", "took_s", "sha256", "user", "ended", "exit_time", "newest",
    "stall_after", "stall_after_s", "median_step_s", "last_step", "last_line_at", "oldest",
    "ago_s", "mtime_age_s", "rate", "first", "reached_step", "bytes", "mode", "id", "py_spy",
    "line",  # stacks: the source line each thread was caught on
}
# Keys whose strings are log lines or command lines: numbers in them vary with time and pids.
# Lists whose order is the order of pids (which wrap): compared as sorted.
UNORDERED = {"procs", "processes", "matched", "groups", "fates", "members"}
LINE_KEYS = {"first_lines", "lines", "last_line", "last_lines", "cmd", "tail", "line", "output", "stdout"}


@functools.lru_cache(None)
def _python3() -> str:
    p = subprocess.run(["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True)
    return p.stdout.strip()


def _marker(v) -> str:
    return "<%s>" % ("null" if v is None else type(v).__name__)


class Norm:
    def __init__(self, tmp: Path, home_id: str | None):
        self.subs = [(str(tmp), "<tmp>")]
        if home_id:
            self.subs.append((home_id, "<home_id>"))
        self.subs.append((str(Path(EXAMPLE).parent.parent), "<repo>"))
        self.subs.append((sys.executable, "<python>"))
        self.subs.append((os.path.realpath(sys.executable), "<python>"))
        if _python3():  # the job's interpreter, as /proc's cmdline names it (pyenv: not PATH's shim)
            self.subs.append((_python3(), "<python3>"))

    def text(self, s: str, line: bool) -> str:
        for old, new in self.subs:
            s = s.replace(old, new)
        s = re.sub(r"/proc/\d+", "/proc/<pid>", s)
        s = re.sub(r"\bpid(s)? \d+", r"pid\1 <pid>", s)
        s = re.sub(r"\d{8}-\d{6}|\d{6,}", "<n>", s)  # time stamps and such in file names
        if re.fullmatch(r"[0-9a-f]{8,64}", s) and re.search(r"\d", s):
            s = "<hash>"  # a file's sha256 (prefix): the bytes of a file a test copies
        if line:
            s = re.sub(r"\d+(\.\d+)?(e[-+]\d+)?", "#", s)
        return s

    def __call__(self, v, key: str = "", line: bool = False):
        if key in VOLATILE and not isinstance(v, (dict, bool)):
            if isinstance(v, list):
                return "<list>"  # how many (pids, zombies, points) is the machine's, not runward's
            return _marker(v)
        if isinstance(v, dict):
            return {self.text(k, False): self(x, k, line) for k, x in v.items()}
        if isinstance(v, list):
            out = [self(x, key, line or key in LINE_KEYS) for x in v]
            if line or key in LINE_KEYS:  # how many log lines fit a window is timing
                out = [x for i, x in enumerate(out) if i == 0 or x != out[i - 1]]
            if key in UNORDERED:
                out.sort(key=lambda x: json.dumps(x, sort_keys=True))
            return out
        if isinstance(v, float):
            return "<float>"  # measured; a float that must be stable is rare and keyed above if so
        if key == "active" and isinstance(v, bool):
            return "<thread active>"  # py-spy's: on a CPU at the sample's moment (flipped under load)
        if isinstance(v, str) and key == "state" and len(v) == 1:
            return "<proc state>"  # /proc's letter (R, S, D) is the scheduler's moment, not runward's
        if isinstance(v, str):
            return self.text(v, line or key in LINE_KEYS)
        return v


def check(name: str, rc: int, doc: dict, cli, tmp_path: Path):
    # the home's id (agent/core/store.py Home.id): names its cgroups, so it shows in paths
    home_id = hashlib.sha1(("%d:%s" % (os.getuid(), os.path.abspath(cli.home))).encode()).hexdigest()[:10]
    got = json.dumps({"exit_code": rc, "document": Norm(tmp_path, home_id)(doc)}, indent=1, sort_keys=True) + "\n"
    path = GOLDEN / f"{name}.json"
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"no golden {path.name}: run with RUNWARD_GOLDEN_UPDATE=1 to write it")
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(got)
        return
    want = path.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), f"golden/{path.name}", "now"))
        pytest.fail(f"`{name}` --json document differs from its golden (RUNWARD_GOLDEN_UPDATE=1 rewrites it "
                    f"if the change is meant):\n{diff}")


def job(cli) -> str:
    dst = cli.cwd / JOB
    if not dst.exists():
        shutil.copy(EXAMPLE, dst)
    return str(dst)


def start(cli, name: str, *extra: str) -> tuple[int, dict]:
    # --ready: first_lines then hold init, ready and a step line however slow the machine is
    rc, doc = cli.json("start", name, "--settle", "1", "--ready", "^step 1 ", *ENV, *extra, "--", "python3", job(cli))
    assert rc == 0, doc
    return rc, doc


def stepped(cli, name: str, n: int = 3):
    """Until the run's log shows step n: the documents that read metrics see some."""
    log = cli.home / "runs" / name / "log"
    wait_for(lambda: log.exists() and f"step {n} " in log.read_text(), 30, f"{name} to reach step {n}")


def restarted(cli, name: str):
    """After a restart: until the second attempt's throughput warm-up (a tenth of its points,
    agent/health/attempts.py WARMUP_FRACTION) ends past the first attempt's last step, so that the two
    share no comparable step and compare's verdict is "too few points" however far the first got."""
    log = (cli.home / "runs" / name / "log").read_text()
    steps = [int(s) for s in re.findall(r"^step (\d+) ", log, re.M)]  # the log runs on across attempts
    first_last = next((a for a, b in zip(steps, steps[1:]) if b <= a), steps[-1])
    stepped(cli, name, 10 * (first_last + 1))


def _deploy_config(cli, tmp_path, key: str):
    (cli.cwd / "train.cfg").write_text("lr = 3e-4\n")
    (cli.cwd / "runward.toml").write_text(
        f'[runs.g-deploy]\n{key} = "local"\ncommand = ["python3", "{job(cli)}"]\n'
        f'files = ["train.cfg:{tmp_path}/far/train.cfg"]\n')
