"""Safe pattern search and kill, with real processes; over a real ssh host when the testbed is up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

import testbed
from conftest import ROOT, alive, read_stat, wait_for

PY = sys.executable
IGNORE_TERM = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"


@pytest.fixture
def tag():
    return "rwtag" + uuid.uuid4().hex[:10]


@pytest.fixture
def victims(tag):
    """Two real processes whose command lines carry the tag; one ignores TERM."""
    ps = [subprocess.Popen([PY, "-c", "import time; time.sleep(300)", tag], start_new_session=True),
          subprocess.Popen([PY, "-c", IGNORE_TERM, tag], start_new_session=True)]
    wait_for(lambda: all(read_stat(p.pid) for p in ps), what="victims")
    yield ps
    for p in ps:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_ps_lists_matches_but_never_itself_or_the_shell_that_runs_it(cli, tag, victims):
    line = f"{' '.join(cli.argv())} ps {tag} --json  # the shell's own argv carries {tag}"
    p = subprocess.run(["bash", "-c", line], cwd=cli.cwd, env=cli.env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    found = {x["pid"] for x in json.loads(p.stdout)["result"]["processes"]}
    assert found == {v.pid for v in victims}
    rec = json.loads(p.stdout)["result"]["processes"][0]
    assert {"pid", "start", "user", "run", "cmd"} <= set(rec) and tag in rec["cmd"]


def test_ps_shows_the_run_a_process_belongs_to(cli, tag):
    rc, doc = cli.json("start", "owned", "--settle", "0.2", "--", PY, "-c", "import time; time.sleep(300)", tag)
    assert rc == 0
    rc, doc = cli.json("ps", tag)
    assert [x["run"] for x in doc["result"]["processes"]] == ["owned.1"]


def test_kill_dry_run_then_yes_from_a_shell_whose_command_line_has_the_pattern(cli, tag, victims):
    rc, doc = cli.json("kill", tag)
    assert rc == 0 and doc["result"]["dry_run"] is True
    assert {m["pid"] for m in doc["result"]["matched"]} == {v.pid for v in victims}
    assert all(alive(v.pid) for v in victims), "a dry run must signal nothing"
    line = f"{' '.join(cli.argv())} kill {tag} --yes --grace 0.5; echo after-{tag}"
    p = subprocess.run(["bash", "-c", line], cwd=cli.cwd, env=cli.env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and f"after-{tag}" in p.stdout, (p.stdout, p.stderr)
    assert not any(alive(v.pid) for v in victims)
    assert "killed" in p.stdout  # the TERM-ignoring one was escalated


def test_kill_refuses_more_than_max(cli, tag, victims):
    rc, doc = cli.json("kill", tag, "--yes", "--max-procs", "1")
    assert rc == 2 and "--max" in doc["error"]["message"]
    assert all(alive(v.pid) for v in victims)


def test_never_pid_1_kernel_threads_or_self(cli):
    rc, doc = cli.json("kill", ".", "--max-procs", "100000")
    assert rc == 0
    pids = {m["pid"] for m in doc["result"]["matched"]}
    assert 1 not in pids and 2 not in pids
    kthreads = {int(d) for d in os.listdir("/proc") if d.isdigit() and read_stat(int(d))
                and open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1] == "2"}
    assert not pids & kthreads
    assert os.getpid() not in pids  # pytest is an ancestor of the CLI


def test_ps_exits_1_when_nothing_matches_as_pgrep_does(cli, tag):
    """`runward ps X && ...` must read as `pgrep X && ...`: no match is exit 1, the document
    still one answer with the empty list (no error: nothing failed to run)."""
    rc, doc = cli.json("ps", f"{tag}-matches-nothing")
    assert rc == 1 and doc["ok"] is False and doc["result"]["processes"] == [] and "error" not in doc
    p = cli.run("ps", f"{tag}-matches-nothing")
    assert p.returncode == 1 and "no process matches" in p.stdout


def test_a_bad_stop_signal_is_bad_input_before_the_run_is_looked_up(cli):
    for verb in ("stop", "restart"):
        for flag in ("--stop-signal", "--signal"):
            rc, doc = cli.json(verb, "no-such-run", flag, "NOTASIGNAL")
            assert rc == 2 and doc["error"]["type"] == "BadInput", doc
            assert "NOTASIGNAL" in doc["error"]["message"]
    rc, doc = cli.json("stop", "no-such-run", "--stop-signal", "sigusr1")
    assert rc == 4, doc  # a good signal: then the missing run is the answer


def test_a_bad_kill_signal_is_bad_input_before_the_target_is_asked(cli):
    # the flag is checked as it is read (signals.known), as stop's: no connect to a host that
    # is not there, and the message names the input as typed (it said 'SIGNOPE', at hop local)
    rc, doc = cli.json("kill", "x", "--signal", "NOPE", "--yes", "--on", "ssh://rw-no-such-host.invalid")
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    assert "'NOPE'" in doc["error"]["message"] and "64" in doc["error"]["hint"], doc


def test_invalid_pattern_and_signal(cli):
    rc, doc = cli.json("ps", "(unclosed")
    assert rc == 2 and "(unclosed" in doc["error"]["message"]
    rc, doc = cli.json("kill", "x", "--signal", "NOPE", "--yes")
    assert rc == 2 and "NOPE" in doc["error"]["message"]


def test_exec_sh_runs_the_linter_first(cli, tag):
    rc, doc = cli.json("exec", "--sh", f"pkill -f {tag}; echo after")
    assert rc == 2 and doc["error"]["type"] == "BadInput" and "self-kill" in json.dumps(doc["error"])
    rc, doc = cli.json("exec", "--sh", f"pkill -f '[{tag[0]}]{tag[1:]}'; echo after")
    assert rc == 0 and doc["result"]["stdout"] == "after\n"


def test_exec_passes_the_commands_exit_code_through(cli):
    """As ssh and docker exec do: `exit 3` is runward's 3, a death by signal N is 128+N, our
    --timeout is 124 (timeout(1)'s); runward's own failures carry "error" in --json."""
    p = cli.run("exec", "--", "sh", "-c", "echo out; exit 3")
    assert p.returncode == 3 and p.stdout == "out\n" and "exit code 3" in p.stderr
    rc, doc = cli.json("exec", "--", "sh", "-c", "exit 3")
    assert rc == 3 and doc["result"]["exit"] == 3 and doc["result"]["code"] == 3 and "error" not in doc
    rc, doc = cli.json("exec", "--", "sh", "-c", "kill -TERM $$")
    assert rc == 128 + 15 and doc["result"]["signal"] == "SIGTERM" and doc["result"]["exit"] == 143
    rc, doc = cli.json("exec", "--timeout", "0.5", "--", "sleep", "30")
    assert rc == 124 and doc["result"]["timed_out"] and doc["result"]["exit"] == 124
    rc, doc = cli.json("exec", "--", "true")
    assert rc == 0 and doc["result"]["exit"] == 0
    rc, doc = cli.json("exec")  # no command: runward's own failure, told apart by "error"
    assert rc == 2 and doc["error"]["type"] == "BadInput" and not doc.get("result")


def test_lint_cli_exit_codes_and_stdin(cli):
    p = cli.run("lint", "ssh host \"pct exec 200 -- bash -lc 'pkill -f train.py; nohup ./run.sh &'\"")
    assert p.returncode == 1 and "self-kill" in p.stdout
    p = cli.run("lint", "-", "--json", input="pkill -f '[t]rain.py'; ls")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and not [f for f in doc["result"]["findings"] if f["severity"] == "error"]


# --------------------------------------------------------------------------- over a real ssh host

def test_kill_over_ssh_from_a_remote_shell_whose_command_line_has_the_pattern(tmp_path, tag):
    tb = testbed.require("ssh")
    runward = ROOT / ".venv" / "bin" / "runward"
    if not runward.exists():
        pytest.skip("needs the project's .venv (scripts/test makes it)")
    testbed.require("pct")
    env = dict(testbed.env(tb), RUNWARD_SSH_CONFIG=tb["ssh_config"], RUNWARD_HOME=str(tmp_path / "h"))
    # The remote side is the LXC container behind the host (its own pid namespace): the test
    # hosts share this machine's pids, so on rw1 itself the local `ssh` client, whose argv
    # carries the pattern, would be visible to the remote pkill -- as it never is for real.
    ct = "ssh://rw1/pct:200"
    src = f"/tmp/rw-src-{tag}"
    subprocess.run([str(runward), "push", "--on", ct, f"{ROOT / 'src' / 'runward'}:{src}/runward"], env=env,
                   check=True, capture_output=True, timeout=60)
    start = f"setsid python3 -c 'import time; time.sleep(300)' {tag} </dev/null >/dev/null 2>&1 &"
    subprocess.run([str(runward), "exec", "--on", ct, "--sh", start], env=env, check=True, capture_output=True,
                   timeout=60)

    def victim_pids():
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    cmd = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
                except OSError:
                    continue
                if cmd[:1] and cmd[0].endswith(b"python3") and b"import time; time.sleep(300)" in cmd and tag.encode() in cmd:
                    out.append(int(d))
        return out
    pids = wait_for(victim_pids, what="the remote victim")
    remote = f"pct exec 200 -- bash -c 'PYTHONPATH={src} python3 -m runward kill {tag} --yes --grace 1; echo after-{tag}'"
    p = subprocess.run(testbed.ssh_argv("rw1", remote, tb=tb), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and f"after-{tag}" in p.stdout, (p.stdout, p.stderr)
    assert "killed 1 process" in p.stdout
    assert not any(alive(x) for x in pids)
    # and from here, through the ssh hop: the agent never kills this CLI (same machine, same
    # boot id: the testbed's hosts share our pids) although its argv carries the pattern
    subprocess.run(testbed.ssh_argv("rw1", start, tb=tb), check=True, timeout=30)
    pids = wait_for(victim_pids, what="the second victim")
    p = subprocess.run([str(runward), "kill", tag, "--on", "ssh://rw1", "--yes", "--json"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert {x["pid"] for x in json.loads(p.stdout)["result"]["processes"]} == set(pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's table is the Linux signal module")
def test_the_clis_signal_rule_is_the_agents():
    """runward.spec.signals (checked before anything is stopped) and agent/proc/terminate.parse_signal
    (what the target takes) accept the same values."""
    from runward.spec import signals
    from runward.agent.proc.terminate import SIGNALS, parse_signal
    from runward.agent.core.wire import AgentFailure
    values = [n[3:] for n in SIGNALS] + [n.lower() for n in SIGNALS] + ["0", "1", "64", "65", "RTMIN+3", "FOO", " term "]
    for v in values:
        try:
            parse_signal(v)
            agent = True
        except AgentFailure:
            agent = False
        assert signals.known(v) == agent, v
