"""slurm:// targets against a real single-node Slurm (scripts/slurm-testbed up: munged,
slurmctld, slurmd), reached here (slurm://local/debug) and through an ssh test host as the
login node (slurm://rw1/debug). Skipped, with the reason, when that Slurm is not up."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import marked, wait_for
from helpers_slurm import in_queue, sb  # noqa: F401  (sb: fixture)


def toml(cli, body: str) -> None:
    (cli.cwd / "runward.toml").write_text(body)


def lifecycle(cli, on: str, name: str) -> None:
    """start (ready), status, logs, watch, stop verified: shared by the local and ssh cases."""
    job = "for i in 1 2 3; do echo step $i; sleep 0.3; done; exec sleep 300"
    rc, doc = cli.json("start", name, "--on", on, "--settle", "1", "--ready", "step 2", "--", "/bin/sh", "-c", job)
    assert rc == 0, doc
    r = doc["result"]
    assert r["slurm_state"] == "RUNNING" and r["ready_line"] == "step 2", r
    assert r["node_pids"], "the job's processes carry the marker on this (the only) node"
    job_id = r["job_id"]
    assert in_queue(job_id)
    assert set(r["node_pids"]) <= set(marked(f"{name}.1")), "the pids reported are the job's, by /proc"
    assert "exec /bin/sh -c" in open(r["slurm"]["script"]).read()  # the script is kept in the run's dir
    rc, doc = cli.json("status", name, "--on", on)
    st = doc["result"]["runs"][0]
    assert (st["state"], st["slurm_state"], st["source"]) == ("running", "RUNNING", "squeue"), st
    rc, doc = cli.json("logs", name, "--on", on, "-n", "5")
    assert "step 1" in doc["result"]["lines"], doc
    p = cli.run("logs", name, "--on", on, "-f", "--for", "1")
    assert p.returncode == 0 and "step 3" in p.stdout, (p.stdout, p.stderr)
    rc, doc = cli.json("watch", name, "--on", on, "--for", "1")
    assert rc == 0 and doc["result"]["alive"] is True, doc
    # history says the attempt's state as status does (Slurm's, not a shim's that never was)
    rc, doc = cli.json("history", name, "--on", on)
    assert rc == 0 and doc["result"]["attempts"][0]["state"] == "running", doc
    rc, doc = cli.json("stop", name, "--on", on, "--grace", "10")
    assert rc == 0, doc
    r = doc["result"]
    assert r["verified_dead"] and "job_left_queue" in r["verified"], r
    assert r["exit"]["signal"] == "TERM" and r["exit"]["exit_code"] == "0:15", r  # sh died of the TERM
    assert not in_queue(job_id)
    assert not marked(f"{name}.1"), "stop verified: nothing of the job is left on the node"
    st = cli.json("status", name, "--on", on)[1]["result"]["runs"][0]
    assert st["slurm_state"] in ("FAILED", "CANCELLED") and st["exit"]["exit_code"] == "0:15", st
    row = cli.json("history", name, "--on", on)[1]["result"]["attempts"][0]
    assert row["state"] == st["state"] and row["slurm"]["state"] == st["slurm_state"], (row, st)


def test_local_start_status_logs_watch_stop(cli, sb):
    lifecycle(cli, "slurm://local/" + sb["partition"], "sl-life")


def test_through_the_login_node_over_ssh(cli, sb, tmp_path):
    import testbed
    tb = testbed.require("ssh")
    if not sb.get("login_host"):
        pytest.skip("the Slurm testbed came up without the ssh testbed: its controller is not reachable from rw1")
    cli.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    # the far side's home under this test's dir (rw1 shares this machine's files)
    toml(cli, f'[targets.login]\non = "slurm://{sb["login_host"]}/{sb["partition"]}"\nhome = "{tmp_path}/far"\n'
              'time = "10:00"\n')
    lifecycle(cli, "login", "sl-ssh")
    assert os.path.isdir(tmp_path / "far" / "runs" / "sl-ssh"), "the records live on the login host"


def test_pending_reports_the_reason_and_stop_cancels_it(cli, sb):
    toml(cli, f'[targets.big]\non = "slurm://local/{sb["partition"]}"\n'
              f'extra = ["--cpus-per-task={sb["cpus"] * 32}"]\n')  # more CPUs than the node has
    rc, doc = cli.json("start", "sl-pend", "--on", "big", "--settle", "0.5", "--", "/bin/sleep", "300")
    assert rc == 0, doc
    r = doc["result"]
    assert r["pending"] and r["slurm_state"] == "PENDING" and r["reason"] == "PartitionConfig", r
    rc, doc = cli.json("status", "sl-pend", "--on", "big")
    st = doc["result"]["runs"][0]
    assert (st["state"], st["reason"]) == ("pending", "PartitionConfig"), st
    rc, doc = cli.json("stop", "sl-pend", "--on", "big")
    assert rc == 0 and doc["result"]["slurm_state"] == "CANCELLED" and doc["result"]["state"] == "stopped", doc
    assert not in_queue(r["job_id"])


def test_early_exit_reports_slurm_state_and_exit_code(cli, sb):
    on = "slurm://local/" + sb["partition"]
    rc, doc = cli.json("start", "sl-fail", "--on", on, "--settle", "5", "--", "/bin/sh", "-c", "echo boom; exit 3")
    assert rc == 1 and doc["error"]["type"] == "ExitedEarly", doc
    assert "FAILED, ExitCode 3:0" in doc["error"]["message"], doc
    assert "boom" in doc["result"]["last_lines"]
    st = cli.json("status", "sl-fail", "--on", on)[1]["result"]["runs"][0]
    assert (st["state"], st["exit"]["code"], st["slurm_state"]) == ("exited", 3, "FAILED"), st


def test_term_trapping_job_checkpoints_within_the_grace(cli, sb):
    on = "slurm://local/" + sb["partition"]
    job = ("trap 'echo checkpoint saved; exit 0' TERM; echo up; "
           "while :; do sleep 0.1; done")
    rc, doc = cli.json("start", "sl-ckpt", "--on", on, "--settle", "0.5", "--ready", "^up$", "--",
                       "/bin/sh", "-c", job)
    assert rc == 0, doc
    rc, doc = cli.json("stop", "sl-ckpt", "--on", on, "--grace", "20")
    r = doc["result"]
    assert rc == 0 and r["verified_dead"] and not r["escalated"], r
    assert (r["slurm_state"], r["exit"]["exit_code"]) == ("COMPLETED", "0:0"), r  # its own exit, in the grace
    rc, doc = cli.json("logs", "sl-ckpt", "--on", on)
    assert "checkpoint saved" in doc["result"]["lines"], doc
    assert not marked("sl-ckpt.1")


def test_a_job_ignoring_term_is_cancelled_after_the_grace(cli, sb):
    on = "slurm://local/" + sb["partition"]
    rc, doc = cli.json("start", "sl-deaf", "--on", on, "--settle", "0.5", "--ready", "^up$", "--",
                       "/bin/sh", "-c", "trap '' TERM; echo up; exec sleep 300")
    assert rc == 0, doc
    rc, doc = cli.json("stop", "sl-deaf", "--on", on, "--grace", "1")
    r = doc["result"]
    assert rc == 0 and r["escalated"] and r["verified_dead"], r
    assert (r["slurm_state"], r["exit"]["signal"]) == ("CANCELLED", "KILL"), r
    assert not marked("sl-deaf.1")


def test_a_process_that_escaped_slurm_is_found_by_the_marker_and_ended(cli, sb):
    """A double fork leaves Slurm's process tracking (proctrack/linuxproc follows parents):
    the job leaves the queue while its grandchild lives on. The marker still finds it."""
    on = "slurm://local/" + sb["partition"]
    rc, doc = cli.json("start", "sl-esc", "--on", on, "--settle", "0.5", "--ready", "spawned", "--",
                       "/bin/sh", "-c", "(setsid sleep 301 &); echo spawned; exec sleep 300")
    assert rc == 0, doc
    wait_for(lambda: len(marked("sl-esc.1")) == 2, what="the job and its escaped grandchild")
    escaped = [p for p in marked("sl-esc.1") if p not in doc["result"]["node_pids"]] or sorted(marked("sl-esc.1"))[-1:]
    rc, doc = cli.json("stop", "sl-esc", "--on", on, "--grace", "10")
    r = doc["result"]
    assert rc == 0 and r["verified_dead"], r
    assert set(r.get("escaped_slurm") or ()) & set(escaped), (r, escaped)
    assert not marked("sl-esc.1"), "nothing of the job is left on the node"


def test_a_second_start_is_refused_and_restart_submits_anew(cli, sb):
    on = "slurm://local/" + sb["partition"]
    rc, doc = cli.json("start", "sl-re", "--on", on, "--settle", "0.3", "--", "/bin/sleep", "300")
    assert rc == 0, doc
    first = doc["result"]["job_id"]
    rc, doc = cli.json("start", "sl-re", "--on", on, "--", "/bin/sleep", "300")
    assert rc == 1 and doc["error"]["type"] == "AlreadyRunning" and first in doc["error"]["message"], doc
    # restart (and start --replace) without the run's --on: the target here is local, whose
    # launcher is the fork; refused before anything is stopped, the job running on in Slurm
    for verb in (["restart", "sl-re"], ["start", "sl-re", "--replace", "--", "/bin/sleep", "300"]):
        rc, doc = cli.json(*verb)
        assert rc == 2 and "are slurm jobs" in doc["error"]["message"] and "--on" in doc["error"]["hint"], doc
        assert in_queue(first) and marked("sl-re.1") and not marked("sl-re.2"), "nothing stopped, nothing forked"
    rc, doc = cli.json("restart", "sl-re", "--on", on, "--settle", "0.3")
    assert rc == 0 and doc["result"]["attempt"] == 2, doc
    assert not in_queue(first) and not marked("sl-re.1"), "the first job was stopped, verified, before the second"
    rc, doc = cli.json("rm", "sl-re", "--on", on)
    assert rc == 1 and "active in Slurm" in doc["error"]["message"], doc  # its records are how it is stopped
    rc, doc = cli.json("stop", "sl-re", "--on", on)
    assert rc == 0 and doc["result"]["verified_dead"] and not marked("sl-re."), doc


def test_srun_launch_gives_the_rank_environment(cli, sb):
    toml(cli, f'[targets.ranks]\non = "slurm://local/{sb["partition"]}"\nsrun = true\nnodes = 1\n')
    job = 'echo "rank=$NODE_RANK of $NNODES master=$MASTER_ADDR:$MASTER_PORT"; exec sleep 300'
    rc, doc = cli.json("start", "sl-rank", "--on", "ranks", "--settle", "0.5", "--ready", "rank=", "--",
                       "/bin/sh", "-c", job)
    assert rc == 0, doc
    node = doc["result"]["nodes"]
    assert doc["result"]["ready_line"] == f"rank=0 of 1 master={node_addr(node)}:29500", doc
    rc, doc = cli.json("stop", "sl-rank", "--on", "ranks", "--grace", "10")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not marked("sl-rank.1")


def node_addr(node: str) -> str:
    out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True).stdout
    return next(w.split("=", 1)[1] for w in out.split() if w.startswith("NodeAddr="))


def test_two_nodes_each_get_their_rank_and_stop_ends_both(cli, sb):
    """The testbed's second slurmd runs in rw2's network namespace (node rwn2): a real
    two-node job, one srun task per node."""
    if not sb.get("multi"):
        pytest.skip("the Slurm testbed has no second node (it needs the ssh testbed's rw2 namespace)")
    toml(cli, f'[targets.two]\non = "slurm://local/{sb["multi"]}"\nnodes = 2\n')
    job = 'echo "rank=$NODE_RANK of $NNODES master=$MASTER_ADDR node=$SLURMD_NODENAME"; exec sleep 300'
    rc, doc = cli.json("start", "sl-two", "--on", "two", "--settle", "0.5", "--ready", "rank=1", "--",
                       "/bin/sh", "-c", job)
    assert rc == 0, doc
    wait_for(lambda: len([ln for ln in cli.json("logs", "sl-two", "--on", "two")[1]["result"]["lines"]
                          if ln.startswith("rank=")]) == 2, what="both ranks' lines")
    lines = sorted(ln for ln in cli.json("logs", "sl-two", "--on", "two")[1]["result"]["lines"] if ln.startswith("rank="))
    nodes = [ln.rsplit("node=", 1)[1] for ln in lines]
    assert sorted(nodes) == sorted(doc["result"]["nodes"].split(",")), (lines, doc["result"]["nodes"])
    master = node_addr(nodes[0])  # rank 0 runs on the first node, whose address every rank is given
    assert lines == [f"rank=0 of 2 master={master} node={nodes[0]}", f"rank=1 of 2 master={master} node={nodes[1]}"]
    rc, doc = cli.json("stop", "sl-two", "--on", "two", "--grace", "10")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not marked("sl-two.1"), "nothing left on either node (they share this machine's pids)"


@pytest.mark.parametrize("where,extra,said", [
    ("slurm://local/nopart", "", "invalid partition specified: nopart"),
    ("bad", 'time = "bogus"', "Invalid --time specification"),
])
def test_sbatch_refusal_is_bad_input_with_its_message_and_nothing_recorded(cli, sb, where, extra, said):
    toml(cli, f'[targets.bad]\non = "slurm://local/{sb["partition"]}"\n{extra}\n')
    rc, doc = cli.json("start", "sl-bad", "--on", where, "--", "/bin/sleep", "300")
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    assert said in doc["error"]["message"], doc
    assert not (cli.home / "runs" / "sl-bad").exists(), "a refused submission records nothing"


def test_gpu_indexes_are_refused_on_slurm(cli, sb):
    rc, doc = cli.json("start", "sl-gpu", "--on", "slurm://local/debug", "--gpus", "0", "--", "/bin/true")
    assert rc == 2 and "the scheduler picks them" in doc["error"]["message"], doc
    assert not (cli.home / "runs" / "sl-gpu").exists()


def _queued_named(name: str) -> str:
    return subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("flags,body,said", [
    (["--restart", "on-failure", "--max-restarts", "3"], "", ["--restart", "--max-restarts"]),
    ([], '[runs.RUN]\n[runs.RUN.health]\nactions = { nan = "stop" }\n', ["[health] actions", "nan = 'stop'"]),
    (["--notify", "/bin/true"], "", ["--notify"]),
])
def test_a_supervision_policy_is_refused_on_slurm_naming_it(cli, sb, flags, body, said):
    """A Slurm job has no runward shim to keep a policy: a restart, a health action or a
    notification would be saved and never happen. Refused, exit 2, naming the option;
    nothing submitted (squeue) and nothing recorded."""
    name = "sl-sup" + str(len(flags))
    toml(cli, body.replace("RUN", name))
    rc, doc = cli.json("start", name, "--on", "slurm://local/debug", *flags, "--", "/bin/sleep", "300")
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    assert all(s in doc["error"]["message"] for s in said) and "Slurm" in doc["error"]["message"], doc
    assert not _queued_named(name), "nothing may have been submitted"
    assert not (cli.home / "runs" / name).exists()
    rc, doc = cli.json("start", name, "--on", "slurm://local/debug", "--restart", "never", "--settle", "0",
                       "--", "/bin/sleep", "300")
    if not body:  # restart = "never" asks for nothing the shim would keep
        assert rc == 0 and _queued_named(name), doc
        assert cli.json("stop", name, "--on", "slurm://local/debug", "--grace", "2")[0] == 0


def test_a_target_without_partition_is_bad_input(cli):
    rc, doc = cli.json("start", "sl-nop", "--on", "slurm://local", "--", "/bin/true")
    assert rc == 2 and "no Slurm partition" in doc["error"]["message"], doc
    assert not (cli.home / "runs").exists()


def test_no_slurm_on_the_host_is_bad_input(cli, sb, tmp_path):
    cli.env["PATH"] = str(tmp_path)  # the agent (absolute python) finds no sbatch
    rc, doc = cli.json("start", "sl-none", "--on", "slurm://local/debug", "--", "/bin/sleep", "300")
    assert rc == 2 and "no Slurm on this host: sbatch not found" in doc["error"]["message"], doc
    assert not (cli.home / "runs" / "sl-none").exists()


def test_target_grammar_and_options():
    from runward.errors import BadInput
    from runward.targets import parse_target
    t = parse_target("slurm://alice@login1:2222/gpu", engine_options={"time": "1:00:00", "extra": ["--mem=4G"]})
    assert str(t) == "slurm://alice@login1:2222/gpu" and t.engine_spec["partition"] == "gpu"
    assert (t.hops[0].kind, t.hops[0].user, t.hops[0].port) == ("ssh", "alice", 2222)
    assert parse_target("slurm://local/debug").hops == ()
    for bad, said in [("slurm://login1", "no Slurm partition"), ("slurm://local/", "no Slurm partition"),
                      ("slurm://lo gin/x", "invalid login host"), ("slurm://h/p;rm", "invalid Slurm partition")]:
        with pytest.raises(BadInput, match=said):
            parse_target(bad)
    with pytest.raises(BadInput, match="unknown Slurm option"):
        parse_target("slurm://h/p", label="x", engine_options={"qos": "high"})
    with pytest.raises(BadInput, match="extra must be a list"):
        parse_target("slurm://h/p", label="x", engine_options={"extra": "--mem=4G"})
    with pytest.raises(BadInput, match="not a slurm:// target"):
        parse_target("ssh://h", label="x", engine_options={"time": "5"})


def test_sacct_is_the_source_where_accounting_exists(sb, tmp_path, monkeypatch):
    """CI has no slurmdbd: a stand-in sacct replays the real one's `-n -P -X -o
    State,ExitCode,Reason,NodeList` line (Slurm 22.05); without accounting the real sacct
    fails ("Slurm accounting storage is disabled") and scontrol is the source."""
    from runward.agent.core import slurm
    fake = tmp_path / "sacct"
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    fake.write_text("#!/bin/sh\necho 'CANCELLED by 0|0:15|None|vm'\n")
    fake.chmod(0o755)
    st = slurm.job_state("999999")  # squeue does not list it: the final record is asked for
    assert (st["state"], st["signal"], st["exit_code"], st["source"]) == ("CANCELLED", "TERM", "0:15", "sacct"), st
    fake.write_text("#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n")
    assert slurm.from_sacct("999999") is None
    assert slurm.job_state("999999") is None, "scontrol does not know it either: no source, never a guess"


def test_restart_names_the_targets_slurm_options_edited_since_the_last_attempt(cli, sb):
    """[targets.X]'s Slurm options are the job's as much as its command: edited between
    attempts, restart names each from the one the last job was submitted with (ground truth:
    the new attempt's record, which sbatch was given); unedited, unchanged."""
    import json as jsonlib
    body = ('[targets.sl]\non = "slurm://local/{p}"\n{opt}'
            '[runs.sl-eng]\non = "sl"\ncommand = ["/bin/sleep", "300"]\nsettle = 0.3\n')
    toml(cli, body.format(p=sb["partition"], opt=""))
    assert cli.json("start", "sl-eng")[0] == 0
    try:
        rc, doc = cli.json("restart", "sl-eng")
        assert rc == 0 and doc["result"]["changed"] == {}, doc
        toml(cli, body.format(p=sb["partition"], opt='time = "0:10:00"\n'))
        p = cli.run("restart", "sl-eng")
        assert p.returncode == 0, p.stderr
        assert "  slurm.options: {} -> {'time': '0:10:00'}" in p.stdout, p.stdout
        record = jsonlib.loads((cli.home / "runs" / "sl-eng" / "attempts" / "3.json").read_text())
        assert record["slurm"]["options"] == {"time": "0:10:00"}, record
        toml(cli, body.format(p=sb["partition"], opt='time = "0:20:00"\n'))
        rc, doc = cli.json("restart", "sl-eng")
        assert rc == 0 and doc["result"]["changed"] == {"engine": {"slurm.options": {
            "from": {"time": "0:10:00"}, "to": {"time": "0:20:00"}}}}, doc["result"]["changed"]
    finally:
        assert cli.json("stop", "sl-eng")[0] == 0
