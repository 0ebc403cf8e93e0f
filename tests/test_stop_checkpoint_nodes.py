"""stop --checkpoint beyond one local job (issue 29): a Slurm job gets the checkpoint signal
through scancel (to the batch step, which the generated script execs into the program), the
stop waits for the line in the job's output, then stops as usual; a multi-node run: every
node is signalled and each node's wait is said, before the verified stop of them all."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import EXAMPLE
from helpers_slurm import sb  # noqa: F401  (the Slurm testbed fixture)

PY = sys.executable
CKPT_ENV = ["--env", "TRAIN_STEP_SECONDS=0.05", "--env", "TRAIN_WORKERS=0", "--env", "TRAIN_ESCAPEE=0",
            "--env", "TRAIN_CKPT_SIGNAL=USR1", "--env", "TRAIN_CHECKPOINT_SECONDS=1.0"]


def test_slurm_stop_checkpoint_signals_through_scancel_and_waits_for_the_line(cli, sb):  # noqa: F811
    rc, doc = cli.json("start", "skp", "--on", f"slurm://local/{sb['partition']}", "--settle", "1", "--ready", "step 3",
                       "--cwd", str(cli.cwd), *CKPT_ENV, "--", PY, str(EXAMPLE))
    assert rc == 0, doc
    rc, doc = cli.json("stop", "skp", "--on", f"slurm://local/{sb['partition']}", "--grace", "10", "--checkpoint",
                       "--checkpoint-wait-for", r"saved checkpoint (\S+)", timeout=180)
    assert rc == 0, doc
    r = doc["result"]
    c = r["checkpoint"]
    assert c["via"].startswith("scancel --signal=USR1 --batch ") and c["job_id"] == r["job_id"], c
    assert c["saw_line"].startswith("saved checkpoint ") and c["waited_s"] >= 1.0, c  # the save took 1 s
    assert (Path(c["saw_line"].split()[-1]) / "COMPLETE").exists()  # saved before the stop's signal
    assert r["verified_dead"] and "job_left_queue" in r["verified"], r



def test_slurm_srun_stop_checkpoint_signals_the_steps_tasks_once(cli, sb):  # noqa: F811
    # with srun the batch step is srun: the signal goes to the job's steps (their tasks), not
    # to srun too, which would forward it and save a second checkpoint
    (cli.cwd / "runward.toml").write_text(f'[targets.ranks]\non = "slurm://local/{sb["partition"]}"\nsrun = true\n'
                                          'nodes = 1\n')
    rc, doc = cli.json("start", "skr", "--on", "ranks", "--settle", "1", "--ready", "step 3", "--cwd", str(cli.cwd),
                       *CKPT_ENV, "--", PY, str(EXAMPLE))
    assert rc == 0, doc
    log = Path(doc["result"]["log"])
    rc, doc = cli.json("stop", "skr", "--on", "ranks", "--grace", "10", "--checkpoint",
                       "--checkpoint-wait-for", r"saved checkpoint (\S+)", timeout=180)
    assert rc == 0 and doc["result"]["verified_dead"], doc
    c = doc["result"]["checkpoint"]
    assert c["via"] == f"scancel --signal=USR1 {doc['result']['job_id']}" and c["saw_line"], c
    assert log.read_text().count("saved checkpoint ") == 1, log.read_text()[-2000:]

def test_multinode_stop_checkpoint_signals_every_node_then_stops_them_all(cli, tmp_path, monkeypatch):
    import uuid

    import helpers_multinode
    import testbed
    from helpers_multinode import _config, _rows
    monkeypatch.setattr(helpers_multinode, "FAST", {"TRAIN_STEP_SECONDS": "0.1", "TRAIN_WORKERS": "0", "TRAIN_ESCAPEE": "0",
                                                 "TRAIN_CKPT_SIGNAL": "USR1", "TRAIN_CHECKPOINT_SECONDS": "1.0"})
    tb = testbed.require("ssh")
    cli.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"])
    name = "mk" + uuid.uuid4().hex[:6]
    _config(tmp_path, ["rw1", "rw2"], name, 'stop_checkpoint = { signal = "USR1", wait_for = "saved checkpoint", timeout = 60 }')
    try:
        rc, doc = cli.json("start", name)
        assert rc == 0, doc
        old = [r["result"]["pid"] for r in _rows(doc)]
        rc, doc = cli.json("restart", name, timeout=180)  # stop_checkpoint makes a restart checkpoint first too
        assert rc == 0, doc
        ck = doc["result"]["steps"][0]["result"]["checkpoint"]
        assert [(c["rank"], c["ok"], c["result"]["sent_to"]) for c in ck] == [(0, True, old[0]), (1, True, old[1])], ck
        assert all(c["result"]["saw_line"].startswith("saved checkpoint ") for c in ck), ck
        pids = [r["result"]["pid"] for r in doc["result"]["nodes"]]
        assert not set(pids) & set(old), (pids, old)
        rc, doc = cli.json("stop", name, timeout=180)
        assert rc == 0 and doc["result"]["verified_dead"], doc
        ck = doc["result"]["checkpoint"]
        assert [(c["rank"], c["ok"]) for c in ck] == [(0, True), (1, True)], ck
        for c, pid in zip(ck, pids):  # each node's own job signalled, each one's wait said
            r = c["result"]
            assert r["sent_to"] == pid and r["saw_line"].startswith("saved checkpoint ") and r["waited_s"] >= 1.0, r
        assert all(r["ok"] and r["result"]["verified_dead"] for r in _rows(doc)), doc
        text = cli.run("stop", name).stdout  # already stopped: each node says its job is not running
        assert "node 0 (n0 (ssh://rw1)) checkpoint: the job is not running" in text, text
    finally:
        cli.run("stop", name, "--no-checkpoint", "--grace", "2")
