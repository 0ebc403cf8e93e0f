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


def test_url_and_notify_passwords_reach_no_snapshot_and_no_compare(cli: CLI):
    """A password runward knows of by a URL's userinfo (an env value under a harmless name,
    the command's, the notify webhook's) is in no kept file and in no compare output; a URL password only
    the file itself holds is kept masked. Ground truth: the bytes under snapshots/."""
    name = f"su{uuid.uuid4().hex[:6]}"
    db_pw, hook_pw, file_pw = ("pw" + uuid.uuid4().hex for _ in range(3))
    db = f"postgres://svc:{db_pw}@db/x"
    hook = f"http://alice:{hook_pw}@127.0.0.1:9/hook"
    (cli.cwd / "job.py").write_text("import time\ntime.sleep(600)\n")
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "job.py", "--db", "{db}"]\ncwd = "{cli.cwd}"\nsettle = 0.2\n'
        f'env = {{ DATABASE_URL = "{db}" }}\nnotify = ["{hook}"]\n'
        f'files = ["db.yaml:{cli.cwd}/db.yaml", "hook.yaml:{cli.cwd}/hook.yaml", "own.yaml:{cli.cwd}/own.yaml"]\n')
    outputs = []
    try:
        for lr in (1, 2):
            (cli.cwd / "db.yaml").write_text(f"lr: {lr}\nurl: {db}\n")
            (cli.cwd / "hook.yaml").write_text(f"lr: {lr}\nhook: {hook}\n")
            (cli.cwd / "own.yaml").write_text(f"lr: {lr}\ncache: redis://cache:{file_pw}@cache:6379/0\n")
            rc, doc = cli.json("start" if lr == 1 else "restart", name)
            assert rc == 0, doc
        rc, doc = cli.json("compare", name)
        assert rc == 0, doc
        outputs.append(json.dumps(doc))
        p = cli.run("compare", name)
        assert p.returncode == 0, p.stderr
        outputs.append(p.stdout + p.stderr)
        diffs = doc["result"]["diffs"]
        assert [a["command"] for a in doc["result"]["attempts"]] == ["python3 job.py --db postgres://svc:***@db/x"] * 2
        assert "lr: 2" in diffs[f"{cli.cwd}/own.yaml"]["diff"] and "redis://cache:***@" in diffs[f"{cli.cwd}/own.yaml"]["diff"], diffs
        for f in ("db.yaml", "hook.yaml"):
            assert "holds" in diffs[f"{cli.cwd}/{f}"]["why"], diffs
        kept = list((cli.home / "runs" / name / "snapshots").iterdir())
        assert kept
        for pw in (db_pw, hook_pw, file_pw):
            assert not [o for o in outputs if pw in o], (pw, outputs)
            assert not [f for f in kept if pw.encode() in f.read_bytes()], (pw, kept)
    finally:
        cli.run("stop", name)


def test_every_url_password_of_a_joined_value_and_its_decoded_form_reach_no_snapshot_or_status(cli: CLI):
    """A value that lists brokers without a space between them (amqp://u:P1@h1,amqp://u:P2@h2)
    has two passwords, and a percent-encoded one (p%40ss) is also the password as a file
    writes it decoded (p@ss). Ground truth: the kept bytes under snapshots/ and every output."""
    name = f"sj{uuid.uuid4().hex[:6]}"
    pw1, pw2, pw3 = ("pw" + uuid.uuid4().hex for _ in range(3))
    brokers = f"amqp://u:{pw1}@h1,amqp://u:{pw2}@h2"
    enc = f"postgres://svc:{pw3}%40x@db/x"  # the password is {pw3}@x
    (cli.cwd / "job.py").write_text("import time\ntime.sleep(600)\n")
    (cli.cwd / "second.yaml").write_text(f"password: {pw2}\n")
    (cli.cwd / "decoded.yaml").write_text(f"password: {pw3}@x\n")
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "job.py"]\ncwd = "{cli.cwd}"\nsettle = 0.2\n'
        f'env = {{ BROKERS = "{brokers}", DB = "{enc}" }}\n'
        f'files = ["second.yaml:{cli.cwd}/second.yaml", "decoded.yaml:{cli.cwd}/decoded.yaml"]\n')
    try:
        p = cli.run("start", name, "--json")
        assert p.returncode == 0, p.stdout + p.stderr
        outputs = [p.stdout + p.stderr, cli.run("status", name, "--json").stdout, cli.run("status", name).stdout,
                   cli.run("history", name, "--json").stdout]
        assert f"amqp://u:***@h1,amqp://u:***@h2" in outputs[0], outputs[0]
        run = cli.home / "runs" / name
        skipped = json.loads((run / "attempts" / "1.json").read_text())["snapshots"]["skipped"]
        assert "password of a URL" in skipped.get(str(cli.cwd / "second.yaml"), ""), skipped
        assert "password of a URL" in skipped.get(str(cli.cwd / "decoded.yaml"), ""), skipped
        kept = list((run / "snapshots").iterdir()) if (run / "snapshots").exists() else []
        for pw in (pw1, pw2, pw3):
            assert not [o for o in outputs if pw in o], (pw, outputs)
            assert not [f for f in kept if pw.encode() in f.read_bytes()], (pw, kept)
    finally:
        cli.run("stop", name)


def test_a_commands_url_password_is_in_no_log_header_and_no_status(cli: CLI):
    """history and compare showed a command's URL password as ***, but runward's own header
    line in the run's log held it in clear, and status printed it (the log's first line, and
    --json's argv). Ground truth: the bytes of the log file (the job prints nothing)."""
    name = f"sh{uuid.uuid4().hex[:6]}"
    pw = "pw" + uuid.uuid4().hex
    (cli.cwd / "job.py").write_text("import time\ntime.sleep(600)\n")
    rc, doc = cli.json("start", name, "--settle", "0.3", "--", "python3", "job.py", "--db", f"postgres://svc:{pw}@db/x")
    try:
        assert rc == 0, doc
        log = (cli.home / "runs" / name / "log").read_bytes()
        assert b"postgres://svc:***@db/x" in log and pw.encode() not in log, log
        for out in (cli.run("status", name).stdout, cli.run("status", name, "--json").stdout,
                    cli.run("logs", name).stdout, cli.run("history", name).stdout):
            assert pw not in out, out
        assert open(f"/proc/{doc['result']['pid']}/cmdline").read().count(pw) == 1  # the job has its URL
    finally:
        cli.run("stop", name)
