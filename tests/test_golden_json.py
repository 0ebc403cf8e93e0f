"""Golden `--json` documents, one per verb (issue 27: the operations-layer refactor must leave
every document the same).

Each case runs the real CLI on a fixed local run (the bundled example job, copied under a
fixed file name so `ps`/`kill` patterns match it alone; fixed env; a fixed run name), then
compares the document with tests/golden/<case>.json after `normalise`: what legitimately
varies between runs (pids, start times, timestamps, durations, sizes, tmp paths, the home's
hash, host facts, numbers in log lines) becomes a marker of its TYPE ("<int>", "<float>",
"<str>"...), so every key, the type of every value, and every stable value (states, verdicts,
verified lists, exit codes, error types, fixed counts) still has to match. A renamed, dropped
or added key, a changed type or a changed verdict fails with a unified diff.

    RUNWARD_GOLDEN_UPDATE=1 pytest tests/test_golden_json.py    # rewrite the goldens

(docs/testing.md). Each case has its own home and its own run, so any one can run alone.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from conftest import marked, wait_for
from helpers_golden import JOB, _deploy_config, check, restarted, start, stepped


def test_start(cli, tmp_path):
    check("start", *start(cli, "g-start"), cli, tmp_path)


def test_status(cli, tmp_path):
    start(cli, "g-status")
    stepped(cli, "g-status")
    check("status", *cli.json("status", "g-status"), cli, tmp_path)


def test_status_all_runs(cli, tmp_path):
    start(cli, "g-all")
    check("status_all", *cli.json("status"), cli, tmp_path)


def test_logs(cli, tmp_path):
    start(cli, "g-logs")
    stepped(cli, "g-logs")
    check("logs", *cli.json("logs", "g-logs", "-n", "2"), cli, tmp_path)


def test_stop(cli, tmp_path):
    start(cli, "g-stop")
    check("stop", *cli.json("stop", "g-stop", "--grace", "5"), cli, tmp_path)


def test_restart(cli, tmp_path):
    start(cli, "g-restart")
    check("restart", *cli.json("restart", "g-restart"), cli, tmp_path)


def test_history_and_compare(cli, tmp_path):
    start(cli, "g-hist")
    stepped(cli, "g-hist")
    assert cli.json("restart", "g-hist")[0] == 0
    restarted(cli, "g-hist")
    check("history", *cli.json("history", "g-hist"), cli, tmp_path)
    check("compare", *cli.json("compare", "g-hist", "1", "2"), cli, tmp_path)


def test_rm(cli, tmp_path):
    start(cli, "g-rm")
    assert cli.json("stop", "g-rm")[0] == 0
    check("rm", *cli.json("rm", "g-rm"), cli, tmp_path)


def test_prune(cli, tmp_path):
    start(cli, "g-prune")
    assert cli.json("stop", "g-prune")[0] == 0
    check("prune", *cli.json("prune", "--older-than", "0s", "--dry-run"), cli, tmp_path)


def test_ps_and_kill(cli, tmp_path):
    start(cli, "g-ps")
    wait_for(lambda: len(marked("g-ps.")) == 4, 20, "the job's four processes")
    check("ps", *cli.json("ps", JOB), cli, tmp_path)
    check("kill_dry_run", *cli.json("kill", JOB), cli, tmp_path)
    check("kill", *cli.json("kill", JOB, "--yes"), cli, tmp_path)


def test_watch(cli, tmp_path):
    start(cli, "g-watch")
    stepped(cli, "g-watch")
    check("watch", *cli.json("watch", "g-watch", "--for", "1"), cli, tmp_path)


def test_gpus_with_stand_in(cli, tmp_path):
    import fakegpu
    state = fakegpu.create_state(tmp_path / "smi.json", gpus=2)
    cli.env = fakegpu.env_with_standin(state, cli.env)
    check("gpus", *cli.json("gpus"), cli, tmp_path)


def test_stacks(cli, tmp_path):
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        pytest.skip("py-spy is not installed (pip install -e '.[stacks]'): no stacks document to compare")
    start(cli, "g-stacks")
    check("stacks", *cli.json("stacks", "g-stacks"), cli, tmp_path)


def test_exec(cli, tmp_path):
    check("exec", *cli.json("exec", "--on", "local", "--", "sh", "-c", "echo out; echo err >&2; exit 3"), cli, tmp_path)


def test_doctor(cli, tmp_path):
    rc, doc = cli.json("doctor")
    for hop in doc["result"]["hops"]:
        pid1 = hop["checks"]["pid1"]
        # whether pid 1 reaps (and so the hint) follows the zombies other processes on this
        # machine leave at that moment: the key and its type stay, the verdict is the machine's
        pid1["reaps"] = "<bool>"
        pid1["hint"] = "<str or absent>"
    check("doctor", rc, doc, cli, tmp_path)


def test_lint(cli, tmp_path):
    check("lint", *cli.json("lint", "ssh h 'pkill -f train.py; nohup ./run.sh &'"), cli, tmp_path)


def test_push_and_pull(cli, tmp_path):
    (cli.cwd / "a.txt").write_text("golden\n")
    dest = tmp_path / "far"
    check("push", *cli.json("push", "--on", "local", f"a.txt:{dest}/a.txt"), cli, tmp_path)
    check("pull", *cli.json("pull", "--on", "local", f"{dest}/a.txt:{cli.cwd}/b.txt"), cli, tmp_path)


def test_deploy(cli, tmp_path):
    _deploy_config(cli, tmp_path, "on")
    check("deploy", *cli.json("deploy", "g-deploy"), cli, tmp_path)


def test_config_with_an_unknown_key(cli, tmp_path):
    _deploy_config(cli, tmp_path, "target")  # a plausible typo: the key is `on`
    check("err_config_unknown_key", *cli.json("deploy", "g-deploy"), cli, tmp_path)


def test_completion(cli, tmp_path):
    rc, doc = cli.json("completion", "bash")
    doc = dict(doc, result={k: (v if not isinstance(v, str) or len(v) < 200 else "<script>")
                            for k, v in (doc.get("result") or {}).items()})
    check("completion", rc, doc, cli, tmp_path)


ERRORS = {
    "err_unknown_run_status": ("status", "g-nosuch"),
    "err_unknown_run_stop": ("stop", "g-nosuch"),
    "err_unknown_run_logs": ("logs", "g-nosuch"),
    "err_unknown_run_history": ("history", "g-nosuch"),
    "err_bad_settle": ("start", "g-bad", "--settle", "soon", "--", "true"),
    "err_bad_env": ("start", "g-bad", "--env", "=x", "--", "true"),
    "err_bad_target": ("status", "--on", "nosuchkind:x"),
    "err_bad_prune_duration": ("prune", "--older-than", "fortnight"),
    "err_top_json": ("top",),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_error_documents(cli, tmp_path, case):
    rc, doc = cli.json(*ERRORS[case])
    assert rc != 0 and doc["ok"] is False, doc
    check(case, rc, doc, cli, tmp_path)


def test_plot(cli, tmp_path):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pytest.skip("matplotlib is not installed (pip install -e '.[plot]'): no plot document to compare")
    start(cli, "g-plot")
    stepped(cli, "g-plot")
    check("plot", *cli.json("plot", "g-plot", "-o", str(tmp_path / "g.png")), cli, tmp_path)
