"""Hostile review of issue 30 (history, compare, baselines) from the outside, on the local
target: ground truth from the attempt records on disk and the job's own log, never runward's
word."""

from __future__ import annotations

import json
import shutil
import uuid

from conftest import CLI, EXAMPLE, wait_for


def _toml(cli: CLI, name: str, extra: str = "", **env: str) -> None:
    envs = ", ".join(f'{k} = "{v}"' for k, v in env.items())
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "train.py"]\ncwd = "{cli.cwd}"\nsettle = 0\n'
        f"env = {{ {envs} }}\n{extra}")


def _attempt(cli: CLI, name: str, n: int) -> dict:
    return json.loads((cli.home / "runs" / name / "attempts" / f"{n}.json").read_text())


def test_history_names_an_env_entry_added_from_an_env_file(cli: CLI):
    """`restart --env-file` adds HF_TOKEN to the job's env (the attempt record's env_from says
    so: ground truth), but history's `changed` listed only the env the target stores, so the
    new key went unsaid (docs/history.md's own example shows `+HF_TOKEN=[secret]`). Its value
    must still be in no output and nowhere under the runward home."""
    name = f"rc{uuid.uuid4().hex[:6]}"
    secret = "hf_" + uuid.uuid4().hex
    shutil.copy(EXAMPLE, cli.cwd / "train.py")
    (cli.cwd / "secrets.env").write_text(f"HF_TOKEN={secret}\n")
    _toml(cli, name, TRAIN_STEPS="3", TRAIN_STEP_SECONDS="0.02")
    assert cli.run("start", name).returncode == 0
    wait_for(lambda: cli.status(name)["state"] == "exited", timeout=30, what="attempt 1's exit")
    p = cli.run("restart", name, "--env-file", str(cli.cwd / "secrets.env"))
    assert p.returncode == 0, p.stderr
    assert _attempt(cli, name, 2)["env_from"] == {"HF_TOKEN": f"file:{cli.cwd / 'secrets.env'}"}
    wait_for(lambda: cli.status(name)["state"] == "exited", timeout=30, what="attempt 2's exit")
    rc, doc = cli.json("history", name)
    assert rc == 0, doc
    changed = doc["result"]["attempts"][1]["changed"]
    assert (changed or {}).get("env", {}).get("added", {}).get("HF_TOKEN") == "[secret]", changed
    text = cli.run("history", name).stdout
    assert "+HF_TOKEN=[secret]" in text, text
    outputs = text + json.dumps(doc) + cli.run("compare", name, "--json").stdout
    assert secret not in outputs
    assert not [f for f in cli.home.rglob("*") if f.is_file() and secret.encode() in f.read_bytes()]


def test_watch_says_a_baseline_attempt_that_is_not_there(cli: CLI):
    """`baseline = "attempt:9"` on a run with two attempts: the rule can never be judged, yet
    watch printed `healthy for 3s` (exit 0) and said nothing of it -- as a gate it passes on a
    misconfigured rule. The text must at least name the missing attempt."""
    name = f"rc{uuid.uuid4().hex[:6]}"
    shutil.copy(EXAMPLE, cli.cwd / "train.py")
    rule = '[runs.{0}.health]\ntok_s = {{ min_ratio = 0.95, baseline = "attempt:9" }}\n'.format(name)
    _toml(cli, name, rule, TRAIN_STEPS="0", TRAIN_STEP_SECONDS="0.02")
    assert cli.run("start", name).returncode == 0
    try:
        assert cli.run("restart", name).returncode == 0
        p = cli.run("watch", name, "--for", "2")
        said = p.stdout + p.stderr
        assert "attempt 9" in said, (p.returncode, said)
    finally:
        cli.run("stop", name)


def test_a_rotated_secrets_old_value_is_kept_in_no_snapshot_nor_shown(cli: CLI):
    """API_KEY rotated in runward.toml; conf.yaml still holds the old value. The new attempt
    checked only the new value, so the file was kept, and once conf.yaml changed, compare's
    diff printed the old secret (`-key: <old value>`). Ground truth: the bytes under
    snapshots/ and compare's output."""
    name = f"rc{uuid.uuid4().hex[:6]}"
    old, new = "old_" + uuid.uuid4().hex, "new_" + uuid.uuid4().hex
    (cli.cwd / "job.py").write_text("pass\n")
    conf = cli.cwd / "conf.yaml"
    conf.write_text(f"key: {old}\n")

    def toml(value):
        (cli.cwd / "runward.toml").write_text(
            f'[runs.{name}]\ncommand = ["python3", "job.py"]\ncwd = "{cli.cwd}"\nsettle = 0\n'
            f'files = ["conf.yaml:{cli.cwd}/dst/conf.yaml"]\nenv = {{ API_KEY = "{value}" }}\n')
    toml(old)
    assert cli.run("deploy", name).returncode == 0
    assert cli.run("start", name).returncode == 0
    toml(new)
    assert cli.run("restart", name).returncode == 0
    conf.write_text("key: from-the-vault\n")
    p = cli.run("restart", name, "--deploy")
    assert p.returncode == 0, p.stderr
    snaps = cli.home / "runs" / name / "snapshots"
    assert not [f.name for f in snaps.iterdir() if old.encode() in f.read_bytes()]
    said = cli.run("compare", name, "2", "3").stdout + cli.run("compare", name, "2", "3", "--json").stdout
    assert old not in said, said
