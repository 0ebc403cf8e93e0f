"""The job's environment: how its values get there (a large environment, `--env NAME` from the
CLI's environment, `--env-file`, re-read at each restart) and where they never are (printed,
written under a runward home on either side, in the shim's or runward's own processes)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import attempt_record


# --- the job's environment never travels in an environment variable -----------------------

def test_a_large_environment_starts_and_stays_out_of_the_shim(cli):
    big = {f"RW_BIG_{i}": chr(65 + i) * (70 << 10) for i in range(15)}  # ~1 MiB, two over 128 KiB together
    cli.env.update(big)
    cli.env["RW_PLANTED"] = "planted-value-q7z"
    rc, doc = cli.json("start", "bigenv", "--settle", "0.3", "--", "sleep", "600")
    assert rc == 0, doc
    job = doc["result"]["pid"]
    environ = Path(f"/proc/{job}/environ").read_bytes()
    assert b"RW_BIG_1=" + b"B" * (70 << 10) in environ and b"planted-value-q7z" in environ
    shim = attempt_record(cli, "bigenv")["shim"]
    shim_env = Path(f"/proc/{shim['pid']}/environ").read_bytes()
    shim_cmd = Path(f"/proc/{shim['pid']}/cmdline").read_bytes()
    assert b"planted-value-q7z" not in shim_env + shim_cmd
    assert b"RUNWARD_SHIM_ENV" not in shim_env



# --- secrets ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["DB_PASS", "GITHUB_PAT", "NPM_AUTH", "AUTHORIZATION", "SESSION_COOKIE",
                                  "AWS_CREDENTIALS", "SSH_PRIVATE", "MYSQL_PWD", "HF_TOKEN"])
def test_secret_looking_names_are_never_printed(cli, name):
    rc, doc = cli.json("start", "sec", "--settle", "0.2", "--env", f"{name}=s3cr3t-{name}", "--", "sleep", "600")
    assert rc == 0, doc
    out = cli.run("status", "sec", "--json").stdout + cli.run("status", "sec").stdout + json.dumps(doc)
    assert f"s3cr3t-{name}" not in out


def test_a_url_with_a_password_is_shown_without_it(cli):
    url = "postgres://alice:hunter2pw@db.internal:5432/x"
    rc, doc = cli.json("start", "url", "--settle", "0.2", "--env", f"DATABASE_URL={url}", "--", "sleep", "600")
    assert rc == 0, doc
    shown = doc["result"]["env"]["DATABASE_URL"]
    assert "hunter2pw" not in json.dumps(doc) and shown == "postgres://alice:***@db.internal:5432/x", shown


def _runward_pids() -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if b"runward" in cmd:
                out.append(int(d))
    return out


def test_env_from_the_cli_environment_and_env_file_leave_no_copy(cli, tmp_path):
    """`--env NAME` takes the value from the CLI's environment and `--env-file` reads
    KEY=VALUE lines: neither value is written to any file under the runward home, printed,
    or found in the command line or environment of runward's own processes."""
    secret_a, secret_b = "planted-env-a-91x", "planted-file-b-37q"
    (tmp_path / "secrets.env").write_text(f"# a comment\nAPI_THING={secret_b}\n\nexport OTHER=plain\n")
    cli.env["MY_API_TOKEN"] = secret_a
    rc, doc = cli.json("start", "sf", "--settle", "0.3", "--env", "MY_API_TOKEN", "--env-file",
                       str(tmp_path / "secrets.env"), "--", "sleep", "600")
    assert rc == 0, doc
    environ = Path(f"/proc/{doc['result']['pid']}/environ").read_bytes()
    assert f"MY_API_TOKEN={secret_a}".encode() in environ and f"API_THING={secret_b}".encode() in environ
    assert b"OTHER=plain" in environ
    printed = json.dumps(doc) + cli.run("status", "sf").stdout + cli.run("status", "sf", "--json").stdout
    for pid in _runward_pids():
        try:
            printed += Path(f"/proc/{pid}/cmdline").read_bytes().decode("latin-1")
            printed += Path(f"/proc/{pid}/environ").read_bytes().decode("latin-1")
        except OSError:
            pass
    for f in cli.home.rglob("*"):
        if f.is_file():
            printed += f.read_bytes().decode("latin-1")
    assert secret_a not in printed and secret_b not in printed


def test_env_name_missing_from_the_cli_environment_is_bad_input(cli):
    cli.env.pop("RW_NOT_SET_ANYWHERE", None)
    rc, doc = cli.json("start", "nx", "--env", "RW_NOT_SET_ANYWHERE", "--", "sleep", "1")
    assert rc == 2 and "RW_NOT_SET_ANYWHERE" in doc["error"]["message"], doc
    assert not (cli.home / "runs" / "nx").exists()


def _job_environ(pid: int) -> dict:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(e.decode().split("=", 1) for e in raw.split(b"\0") if b"=" in e)


def _files_holding(root: Path, *values: str) -> list[str]:
    return [str(f) for f in root.rglob("*") if f.is_file() and not f.is_symlink()
            and any(v.encode() in f.read_bytes() for v in values)]


def test_restart_reads_an_env_name_again_and_refuses_when_it_is_gone(cli):
    cli.env["RW_ROTATING_TOKEN"] = "first-value-k2"
    rc, doc = cli.json("start", "rot", "--settle", "0.3", "--env", "RW_ROTATING_TOKEN", "--", "sleep", "600")
    assert rc == 0 and doc["result"]["env_from"] == {"RW_ROTATING_TOKEN": "environment"}, doc
    assert _job_environ(doc["result"]["pid"])["RW_ROTATING_TOKEN"] == "first-value-k2"
    cli.env["RW_ROTATING_TOKEN"] = "second-value-k3"  # rotated between the start and the restart
    rc, doc = cli.json("restart", "rot", "--settle", "0.3")
    assert rc == 0, doc
    pid = doc["result"]["pid"]
    assert _job_environ(pid)["RW_ROTATING_TOKEN"] == "second-value-k3"
    del cli.env["RW_ROTATING_TOKEN"]
    rc, doc = cli.json("restart", "rot", "--settle", "0.3")
    assert rc == 2 and "RW_ROTATING_TOKEN" in doc["error"]["message"], doc
    st = cli.status("rot")  # refused before anything was stopped
    assert st["state"] == "running" and st["pid"] == pid, st
    assert not _files_holding(cli.home, "first-value-k2", "second-value-k3")


def test_restart_with_a_typed_value_stops_reading_it_from_elsewhere(monkeypatch):
    from runward import api
    monkeypatch.delenv("RW_GONE_NOW", raising=False)
    monkeypatch.setenv("RW_STILL_HERE", "from-env")
    spec = {"env": {"LR": "0.1", "HF_TOKEN": "[secret]"}, "env_from": {"RW_GONE_NOW": "environment",
                                                                      "RW_STILL_HERE": "environment"}}
    kw = api.restart_kwargs(spec, {"env": {"RW_GONE_NOW": "typed"}, "env_from": {}, "settle": None})
    assert kw["env"] == {"LR": "0.1", "HF_TOKEN": "[secret]", "RW_GONE_NOW": "typed", "RW_STILL_HERE": "from-env"}
    assert kw["env_from"] == {"RW_STILL_HERE": "environment"} and kw["reuse_env"] is True


def test_env_file_format_values_reach_the_job_and_no_file(cli, tmp_path):
    """docker's --env-file: comments and blank lines skipped, `export` allowed, a value
    taken verbatim after the first '=' (more '=', '#', quotes, spaces kept)."""
    env_file = tmp_path / "job.env"
    env_file.write_text("# the database\n\n   \nexport RW_DSN=host=db user=x password=pw-9f==\n"
                        "RW_QUOTED=\"kept quotes\" # not a comment\n  # indented comment\nRW_EMPTY=\n")
    rc, doc = cli.json("start", "ef", "--settle", "0.3", "--env-file", str(env_file), "--", "sleep", "600")
    assert rc == 0, doc
    env = _job_environ(doc["result"]["pid"])
    assert env["RW_DSN"] == "host=db user=x password=pw-9f=="
    assert env["RW_QUOTED"] == '"kept quotes" # not a comment' and env["RW_EMPTY"] == ""
    assert set(doc["result"]["env_from"]) == {"RW_DSN", "RW_QUOTED", "RW_EMPTY"}
    assert not _files_holding(cli.home, "pw-9f==", "kept quotes")
    env_file.write_text("export RW_DSN=host=db password=rotated-4e\nRW_QUOTED=q\nRW_EMPTY=\n")
    rc, doc = cli.json("restart", "ef", "--settle", "0.3")
    assert rc == 0, doc
    assert _job_environ(doc["result"]["pid"])["RW_DSN"] == "host=db password=rotated-4e"
    assert not _files_holding(cli.home, "pw-9f==", "rotated-4e")


def test_over_ssh_no_file_on_the_target_holds_an_env_from_value(cli, tmp_path):
    """The testbed's hosts share this machine's filesystem: every file under the far home
    (records, logs, shim logs, the agent's cache, a resident's files) is read after start,
    status and restart."""
    import uuid

    import testbed
    tb = testbed.require("ssh")
    far_home = Path(f"/tmp/rw-sec-{uuid.uuid4().hex[:8]}")
    cli.env = testbed.env(tb, cli.env)
    cli.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"], RUNWARD_RESIDENT_IDLE="60", RW_SSH_SECRET="planted-over-ssh-5m")
    (tmp_path / "runward.toml").write_text(f'[targets.h]\non = "ssh://rw1"\nhome = "{far_home}"\n'
                                           f'python = "/usr/bin/python3"\n')
    (tmp_path / "s.env").write_text("RW_SSH_FILE=planted-file-ssh-8w\n")
    cli.cwd = tmp_path
    planted = ("planted-over-ssh-5m", "planted-file-ssh-8w")
    try:
        rc, doc = cli.json("start", "sshsec", "--on", "h", "--settle", "0.3", "--env", "RW_SSH_SECRET",
                           "--env-file", str(tmp_path / "s.env"), "--env", "HF_TOKEN=typed-is-kept",
                           "--", "sleep", "600")
        assert rc == 0, doc
        env = _job_environ(doc["result"]["pid"])
        assert env["RW_SSH_SECRET"] == planted[0] and env["RW_SSH_FILE"] == planted[1]
        printed = json.dumps(doc)
        for _ in range(2):  # the second status goes through the resident, once it is up
            printed += cli.run("status", "sshsec", "--on", "h", "--json").stdout
        rc, doc = cli.json("restart", "sshsec", "--on", "h", "--settle", "0.3")
        assert rc == 0, doc
        env = _job_environ(doc["result"]["pid"])
        assert env["RW_SSH_SECRET"] == planted[0] and env["HF_TOKEN"] == "typed-is-kept"
        printed += json.dumps(doc) + cli.run("status", "sshsec", "--on", "h").stdout
        assert not any(v in printed for v in (*planted, "typed-is-kept"))
        assert not _files_holding(far_home, *planted) and not _files_holding(cli.home, *planted)
        # runward's own processes that outlive the call: the ssh ControlMaster (started with
        # the CLI's environment, where RW_SSH_SECRET lives), the resident, the shims
        job = doc["result"]["pid"]
        for pid in _runward_pids():
            if pid == job:
                continue
            try:
                mine = Path(f"/proc/{pid}/cmdline").read_bytes() + Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            assert not any(v.encode() in mine for v in planted), (pid, mine[:200])
    finally:
        cli.run("stop", "sshsec", "--on", "h")
        shutil.rmtree(far_home, ignore_errors=True)
