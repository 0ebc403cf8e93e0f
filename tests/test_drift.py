"""Drift: the code on disk is not the code running (`drift`), or the local copy is not the
deployed one (`local_drift`). A pushed directory's files count one by one; a file a push
--delete removed is not still deployed; restart --deploy says the drift it leaves; a local
file that cannot be read is said, never a traceback, and a deploy failing after the stop is
never exit 2. Real files and processes; ground truth from the files themselves."""

from __future__ import annotations

import hashlib
import json
import os

from conftest import alive
from helpers_membership import ordinary, record  # noqa: F401 (a fixture)


def test_a_file_edited_on_the_target_inside_a_pushed_directory_is_drift(cli, tmp_path):
    """A run whose `files` is a directory: its start records {dir: None} (sha256 of a
    directory fails, kept as None), so `drift` ("the code on disk is not the code running",
    README) is blind to every file in it: a.py rewritten and b.py deleted on the target
    while the job runs, and status says nothing."""
    pkg = cli.cwd / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("print('a')\n")
    (pkg / "b.py").write_text("print('b')\n")
    dst = tmp_path / "dst" / "pkg"
    (cli.cwd / "runward.toml").write_text(
        f'[runs.dirdrift]\nsh = "exec sleep 600"\nfiles = ["pkg:{dst}"]\n')
    rc, doc = cli.json("deploy", "dirdrift")
    assert rc == 0, doc
    rc, doc = cli.json("start", "dirdrift", "--settle", "0.2")
    assert rc == 0, doc
    try:
        started_with = hashlib.sha256((dst / "a.py").read_bytes()).hexdigest()
        (dst / "a.py").write_text("print('changed behind runward')\n")
        (dst / "b.py").unlink()
        assert hashlib.sha256((dst / "a.py").read_bytes()).hexdigest() != started_with
        st = cli.status("dirdrift")
        assert st["state"] == "running", st
        drifted = {d["path"] for d in st.get("drift") or ()}
        assert {str(dst / "a.py"), str(dst / "b.py")} <= drifted, (
            "the code on disk is not the code running, and status does not say so: %s" % st.get("drift"))
    finally:
        cli.json("stop", "dirdrift", "--grace", "2")


def test_restart_deploy_says_the_local_drift_it_left(cli, tmp_path):
    """A file renamed locally in a pushed directory (a.py -> a2.py): `restart --deploy` sends
    a2.py and leaves a.py on the target (no --delete), which the job still sees. Before: exit
    0, 'verified', no word of it in the result; the next plain `restart` is then refused for
    that very drift. `--no-deploy` lists the local_drift it leaves; --deploy must as well."""
    pkg = cli.cwd / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("print('a')\n")
    dst = tmp_path / "dst" / "pkg"
    (cli.cwd / "runward.toml").write_text(f'[runs.renamed]\nsh = "exec sleep 600"\nfiles = ["pkg:{dst}"]\n')
    assert cli.json("deploy", "renamed")[0] == 0
    rc, doc = cli.json("start", "renamed", "--settle", "0.2")
    assert rc == 0, doc
    try:
        (pkg / "a.py").rename(pkg / "a2.py")
        rc, doc = cli.json("restart", "renamed", "--deploy", "--settle", "0.2")
        assert rc == 0, doc
        assert (dst / "a.py").exists() and (dst / "a2.py").exists()  # ground truth: both on the target
        assert "local_drift" in json.dumps(doc["result"]) and str(dst / "a.py") in json.dumps(doc["result"]), (
            "restart --deploy left %s on the target and said nothing: %s" % (dst / "a.py", doc["result"]))
    finally:
        cli.json("stop", "renamed", "--grace", "2")


def test_a_file_push_delete_removed_is_not_said_to_be_still_deployed(cli, tmp_path):
    """b.py deleted locally, then `push --delete` of the same directory removes it from the
    target (ground truth: gone). deployed.json is only `deploy`'s: status went on saying 'b.py
    deleted locally, still deployed', and `restart` refused for a drift that is not there."""
    pkg = cli.cwd / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("a\n")
    (pkg / "b.py").write_text("b\n")
    dst = tmp_path / "dst" / "pkg"
    (cli.cwd / "runward.toml").write_text(f'[runs.pushdel]\nsh = "exec sleep 600"\nfiles = ["pkg:{dst}"]\n')
    assert cli.json("deploy", "pushdel")[0] == 0
    rc, doc = cli.json("start", "pushdel", "--settle", "0.2")
    assert rc == 0, doc
    try:
        (pkg / "b.py").unlink()
        rc, doc = cli.json("push", "--on", "local", "--delete", f"pkg:{dst}")
        assert rc == 0, doc
        assert not (dst / "b.py").exists() and (dst / "a.py").exists()  # ground truth
        st = cli.status("pushdel")
        stale = [d for d in st.get("local_drift") or () if d.get("remote") == str(dst / "b.py")]
        assert not stale, "status says %s is still deployed; it is gone: %s" % (dst / "b.py", stale)
    finally:
        cli.json("stop", "pushdel", "--grace", "2")


def _unreadable_project(run, name, sh):
    base = run.home.parent
    pkg = base / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("print(1)\n")
    (base / "runward.toml").write_text(f'[runs.{name}]\nsh = "{sh}"\nfiles = ["pkg:{base}/dst/pkg"]\n')
    for p in (pkg, pkg / "a.py", base / "runward.toml"):
        os.chown(p, run.uid, run.uid)
    p = run("deploy", name, "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    return pkg


def test_status_with_an_unreadable_local_file_in_a_pushed_directory_answers(ordinary):
    """`status` in the project reads the local files for local_drift; one it may not read
    (mode 000) made it die with a PermissionError traceback, exit 1, no JSON document under
    --json (README: every command prints exactly one)."""
    run = ordinary
    pkg = _unreadable_project(run, "unread", "exec sleep 600")
    p = run("start", "unread", "--settle", "0.2", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        (pkg / "a.py").chmod(0)
        p = run("status", "unread", "--json")
        assert "Traceback" not in p.stderr, p.stderr[-600:]
        doc = json.loads(p.stdout)  # one JSON document
        assert str(pkg / "a.py") in json.dumps(doc), doc
    finally:
        run("stop", "unread", "--grace", "2")


def test_restart_deploy_that_stopped_the_run_never_exits_2(ordinary):
    """README: a restart's exit 2 means bad input found before anything was stopped ("the old
    attempt untouched"). A local file that turns unreadable after the plan (the old job's
    TERM trap chmods it, as any process of the user may) failed the deploy after the stop:
    exit 2, 'the run is stopped'. A script reading exit 2 as untouched is misled; the other
    deploy failures after the stop (disk full, a directory in the way) are exit 1."""
    run = ordinary
    base = run.home.parent
    pkg = _unreadable_project(run, "unread2", f"trap 'chmod 000 {base}/pkg/a.py; exit 0' TERM; "
                                              "while :; do sleep 0.1; done")
    p = run("start", "unread2", "--settle", "0.2", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    job = record(run.home, "unread2")["job"]
    try:
        (pkg / "a.py").write_text("print(2)\n")
        p = run("restart", "unread2", "--deploy", "--settle", "0.2", "--json")
        stopped = not alive(job["pid"], job["start"])
        assert not (p.returncode == 2 and stopped), (
            "exit 2 (untouched, README) while the old attempt was stopped: %s" % p.stdout[-400:])
    finally:
        (pkg / "a.py").chmod(0o644)
        run("stop", "unread2", "--grace", "2")
