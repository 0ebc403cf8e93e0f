"""`runward top` (issue 19) in a real terminal: tmux runs it in a detached session on a private
socket; capture-pane reads what a person would see and send-keys types. It watches real runs
of the example job on the local target; the GPU panel reads the nvidia-smi stand-in
(tests/fakegpu.py), to which the job attaches itself (TRAIN_GPU_MIB).

Without rich (the extra runward[top]) `top` must say how to get it and exit 2, and neither
`--help` nor the base install may import it."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import fakegpu
from conftest import EXAMPLE, alive, gate, marked, wait_for
from helpers_top import PY, Terminal, needs_rich, needs_tmux


@pytest.fixture
def terminal(tmp_path):
    opened = []

    def open_(env, cwd, argv, **kw):
        t = Terminal(tmp_path, env, cwd, argv, **kw)
        opened.append(t)
        return t
    yield open_
    for t in opened:
        t.close()


def start_job(cli, name: str, *env: str) -> dict:
    args = []
    for e in ("TRAIN_STEP_SECONDS=0.1", *env):
        args += ["--env", e]
    rc, doc = cli.json("start", name, *args, "--", PY, str(EXAMPLE))
    assert rc == 0, doc
    return doc["result"]


def run_state(cli, name: str) -> str:
    rc, doc = cli.json("status", name)
    assert rc == 0, doc
    return doc["result"]["runs"][0]["state"]


# --------------------------------------------------------------------------- without rich


def test_help_and_the_verb_table_never_import_rich(cli):
    code = ("import sys\nfrom runward import cli\n"
            "for argv in (['--help'], ['top', '--help']):\n"
            "    try:\n        cli.main(argv)\n    except SystemExit:\n        pass\n"
            "print('RICH', 'rich' in sys.modules)")
    p = subprocess.run([PY, "-c", code], env=cli.env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "RICH False" in p.stdout
    assert re.search(r"^\s+top\s+a live view of runs and GPUs", p.stdout, re.M), p.stdout
    assert "--interval" in p.stdout and "--all" in p.stdout


def test_without_rich_top_names_the_extra_and_exits_2(cli):
    # None in sys.modules makes `import rich` raise ImportError, as on a base install
    code = "import sys\nsys.modules['rich'] = None\nfrom runward import cli\nsys.exit(cli.main(['top']))"
    p = subprocess.run([PY, "-c", code], env=cli.env, cwd=cli.cwd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "pip install 'runward[top]'" in p.stderr


@needs_rich
def test_top_without_a_terminal_or_with_json_is_bad_input(cli):
    p = cli.run("top", timeout=60)  # stdin and stdout are pipes here
    assert p.returncode == 2 and "needs a terminal" in p.stderr, p.stderr
    rc, doc = cli.json("top", timeout=60)
    assert rc == 2 and doc["ok"] is False and "status --json" in doc["error"]["hint"], doc


# --------------------------------------------------------------------------- in a terminal


@needs_tmux
@needs_rich
def test_top_shows_a_run_opens_its_log_and_stops_it_after_yes(cli, terminal):
    run = start_job(cli, "toprun")
    tree = wait_for(lambda: marked("toprun."), 20, "the run's processes")
    t = terminal(cli.env, cli.cwd, [PY, "-m", "runward", "top", "--interval", "0.5"])
    screen = t.shows(r"toprun\s+│\s+running")
    assert "RUN" in screen and "STATE" in screen
    screen = t.shows(r"loss \d+\.\d+")  # a metric of the job's log, with its sparkline beside it
    assert re.search(r"tok_s \d+(\.\d+)? [▁▂▃▄▅▆▇█]+", screen), screen

    t.keys("l")  # the selected run's last log lines
    t.shows(r"log of toprun on local")
    t.shows(r"│ step \d+ loss \d")
    t.keys("l")
    wait_for(lambda: "log of toprun" not in t.screen(), 10, "the log pane to close")

    t.keys("s")
    t.shows(r"stop toprun on local\? y/n")
    t.keys("n")  # anything but y leaves it running
    t.shows(r"not stopped: toprun")
    assert run_state(cli, "toprun") == "running"
    assert all(alive(pid, start) for pid, start in tree.items())

    t.keys("s")
    t.shows(r"stop toprun on local\? y/n")
    t.keys("y")
    t.shows(rf"stopped toprun attempt {run['attempt']}: \d+ process\(es\) dead, verified")
    t.shows(r"toprun\s+│\s+exited")
    assert run_state(cli, "toprun") != "running"
    assert not any(alive(pid, start) for pid, start in tree.items()), tree  # /proc: every one dead
    assert not marked("toprun.")

    t.keys("q")
    assert t.exit_code() == 0


@needs_tmux
@needs_rich
def test_gpu_panel_names_holders_by_run_and_arrows_select_the_run_to_stop(cli, terminal, tmp_path):
    state = fakegpu.create_state(tmp_path / "smi.json", gpus=2)
    cli.env = fakegpu.env_with_standin(state, cli.env)
    start_job(cli, "alpha", "TRAIN_GPU_MIB=30000")
    start_job(cli, "beta", "TRAIN_GPU_MIB=20000")
    alpha = wait_for(lambda: marked("alpha."), 20, "alpha's processes")
    beta = wait_for(lambda: marked("beta."), 20, "beta's processes")
    wait_for(lambda: len(fakegpu.read_state(state)["procs"]) == 2, 30, "both jobs on the fake GPUs")

    t = terminal(cli.env, cli.cwd, [PY, "-m", "runward", "top", "--interval", "0.5"])
    screen = t.shows(r"alpha#1 30,000 MiB")
    assert "beta#1 20,000 MiB" in screen, screen
    assert fakegpu.H100 in screen and "81,559 MiB" in screen

    t.keys("Down")  # alpha is first (by name), beta second
    t.keys("s")
    t.shows(r"stop beta on local\? y/n")
    t.keys("y")
    t.shows(r"stopped beta attempt 1: .*verified")
    assert run_state(cli, "beta") != "running" and run_state(cli, "alpha") == "running"
    assert not any(alive(pid, start) for pid, start in beta.items())
    assert all(alive(pid, start) for pid, start in alpha.items())
    screen = t.shows(r"beta\s+│\s+exited")
    wait_for(lambda: "beta#1" not in t.screen(), 20, "beta's GPU memory to leave the panel")

    t.keys("Up", "k")  # at the top it stays there
    t.keys("q")
    assert t.exit_code() == 0
    assert run_state(cli, "alpha") == "running"


@needs_tmux
@needs_rich
def test_all_shows_runs_of_every_named_target_and_stops_one_over_ssh(cli, terminal, tmp_path):
    import testbed
    tb = testbed.require("ssh")
    cli.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"])
    far_home = f"/tmp/rw-top-{os.getpid()}-{tmp_path.name}"  # a home of its own on rw1
    (tmp_path / "runward.toml").write_text(
        f'[targets.here]\non = "local"\n\n[targets.h1]\non = "ssh://rw1"\nhome = "{far_home}"\n\n'
        '[runs.near]\non = "here"\ncommand = ["sleep", "300"]\nsettle = 0.3\n\n'
        '[runs.far]\non = "h1"\ncommand = ["sleep", "300"]\nsettle = 0.3\n')
    try:
        rc, doc = cli.json("start", "--all")
        assert rc == 0, doc
        far = next(r["result"] for r in doc["runs"] if r["name"] == "far")
        t = terminal(cli.env, cli.cwd, [PY, "-m", "runward", "top", "--all", "--interval", "0.5"])
        screen = t.shows(r"h1 \(ssh://rw1\)\s+│\s+far\s+│\s+running")
        assert re.search(r"here \(local\)\s+│\s+near\s+│\s+running", screen), screen
        assert "TARGET" in screen

        t.keys("Down")  # near (on here) first, far (on h1) second
        t.keys("s")
        t.shows(r"stop far on h1 \(ssh://rw1\)\? y/n")
        t.keys("y")
        t.shows(rf"stopped far attempt {far['attempt']}: .*verified")
        t.keys("q")
        assert t.exit_code() == 0
        assert not alive(far["pid"], far["start_time"])  # the test hosts share this pid namespace
        rc, doc = cli.json("status", "far", "--on", "h1")
        assert doc["result"]["runs"][0]["state"] == "exited", doc
        assert cli.status("near")["state"] == "running"
    finally:
        cli.run("stop", "--all")
        cli.run("rm", "far", "--on", "h1", "--logs")


@needs_tmux
@needs_rich
def test_top_counts_a_supervised_runs_restarts(cli, terminal):
    """A run that crashes and is restarted by its policy: top's RESTARTS column counts the
    restarts against the limit, as status --json says them."""
    rc, doc = cli.json("start", "crashy", "--settle", "0.2", "--restart", "always", "--max-restarts", "50",
                       "--backoff", "0.5s..0.5s", "--sh", gate(cli.cwd / "go") + "; sleep 0.3; exit 3")
    assert rc == 0, doc
    (cli.cwd / "go").touch()  # from here on each attempt crashes by itself
    try:
        st = wait_for(lambda: (lambda r: r if r.get("restarts", 0) >= 2 else None)(
            cli.json("status", "crashy")[1]["result"]["runs"][0]), 60, "two restarts")
        t = terminal(cli.env, cli.cwd, [PY, "-m", "runward", "top", "--interval", "0.5"])
        screen = t.shows(r"RESTARTS")
        screen = t.shows(r"crashy\s+│\s+(running|restarting)\s+│[^│]*│\s+\d+\s+│\s+([2-9]|\d\d)/50\s")
        assert st["policy"]["max_restarts"] == 50, st
        t.keys("q")
        assert t.exit_code() == 0
    finally:
        cli.json("stop", "crashy", "--grace", "2")


@needs_tmux
@needs_rich
def test_last_alert_keeps_a_readable_width_beside_a_long_target_at_160_columns(cli, terminal):
    long = "gpu-box-number-one-in-the-rack-a-of-the-east-hall-row-12"
    (cli.cwd / "runward.toml").write_text(f'[targets.{long}]\non = "local"\n\n'
                                          f'[targets.other]\non = "local"\nhome = "{cli.home}-2"\n')
    rc, doc = cli.json("start", "nanr", "--settle", "0.3", "--sh",
                       'echo "step 1 loss 2.5"; echo "step 2 loss nan"; exec sleep 300')
    assert rc == 0, doc
    try:
        t = terminal(cli.env, cli.cwd, [PY, "-m", "runward", "top", "--all"], width=160)
        screen = t.shows(r"NaN")
        header = next(line for line in screen.splitlines() if "LAST ALERT" in line)
        alert_cell = header.rstrip().rstrip("┃").rsplit("┃", 1)[1]
        assert len(alert_cell) >= 36, (len(alert_cell), screen)
        assert "loss is NaN" in screen.replace("\n", " ") or "NaN: loss" in screen, screen
        # no restart policy: RESTARTS reads "-", not 0
        assert re.search(r"nanr\s+│\s+running\s+│[^│]*│\s+1\s+│\s+-\s+│", screen), screen
        t.keys("q")
        assert t.exit_code() == 0
    finally:
        cli.json("stop", "nanr", "--grace", "2")
