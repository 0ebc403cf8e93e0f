"""No secret's value in a kept snapshot (issue 30), also for a secret the target never stores:
`--env HF_TOKEN` (the value read from the CLI's environment, env_from) at start, and the
attempt the shim starts on a restart policy. Ground truth: the bytes under the run's
snapshots/ directory."""

from __future__ import annotations

import json
import uuid

from conftest import CLI, wait_for

SECRET = "hf_" + uuid.uuid4().hex


def test_a_file_holding_an_env_from_secret_is_never_kept(cli: CLI):
    name = f"ss{uuid.uuid4().hex[:6]}"
    (cli.cwd / "conf.yaml").write_text(f"token: {SECRET}\n")
    (cli.cwd / "job.py").write_text("import sys\nsys.exit(3)\n")
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "job.py"]\ncwd = "{cli.cwd}"\nsettle = 0\n'
        f'files = ["conf.yaml:{cli.cwd}/conf.yaml"]\nrestart = "on-failure"\nmax_restarts = 1\nbackoff = "0"\n')
    cli.env["HF_TOKEN"] = SECRET
    rc, doc = cli.json("start", name, "--env", "HF_TOKEN")
    assert rc in (0, 1), doc
    wait_for(lambda: cli.status(name)["state"] == "gave_up", timeout=60, what="the start and the shim's restart")
    run = cli.home / "runs" / name
    for n in (1, 2):  # the start's attempt, then the shim's
        snap = json.loads((run / "attempts" / f"{n}.json").read_text())["snapshots"]
        assert snap["skipped"].get(str(cli.cwd / "conf.yaml")) == "holds the value of a secret env entry", (n, snap)
    kept = [f for f in (run / "snapshots").iterdir()] if (run / "snapshots").exists() else []
    assert kept and not any(SECRET.encode() in f.read_bytes() for f in kept), kept  # job.py kept, conf.yaml not
