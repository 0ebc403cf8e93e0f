"""The holes a hostile review found in "verified" (issue 13), each reproduced from the outside
through the CLI with real processes: a second stop signal, a pidfd error read as "gone", a
session member forgotten, a dead shim called an exited job, the job's environment in the
shim's, a planted symlink followed, secrets where they should not be, records and locks."""

from __future__ import annotations

import json
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, alive, marked, read_stat, wait_for, world_readable_src

PY = sys.executable
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (another user's files, another uid)")


def attempt_record(cli, name: str, n: int = 1) -> dict:
    p = cli.home / "runs" / name / "attempts" / f"{n}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return {}


# --- a stop signals each process once -------------------------------------------------------

SIGNAL_COUNTER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    out = sys.argv[1]
    HELPER = '''
    import signal, sys, time
    out = sys.argv[1]
    def on(s, f):
        open(out, "a").write("helper %d\\\\n" % s)
    signal.signal(signal.SIGTERM, on)
    signal.signal(signal.SIGINT, on)
    open(out, "a").write("helper up\\\\n")
    time.sleep(1.5)
    '''
    got = []
    def on(s, f):
        got.append(time.time())
        open(out, "a").write("job %d\\n" % s)
        if len(got) == 1:  # a checkpoint uploader started on the stop signal
            subprocess.Popen([sys.executable, "-c", HELPER, out])
    signal.signal(signal.SIGTERM, on)
    signal.signal(signal.SIGINT, on)
    print("ready", flush=True)
    while not got or time.time() - got[0] < 3.0:
        time.sleep(0.05)
""")


def test_stop_sends_the_stop_signal_to_each_process_once(cli, tmp_path):
    """A job that starts a helper when it gets SIGTERM must not get a second SIGTERM: to
    torchrun, Lightning and the HF Trainer a second signal means "abort now"."""
    script = tmp_path / "job.py"
    script.write_text(SIGNAL_COUNTER)
    out = tmp_path / "signals.txt"
    rc, doc = cli.json("start", "once", "--settle", "0.3", "--", PY, str(script), str(out))
    assert rc == 0, doc
    rc, doc = cli.json("stop", "once", "--grace", "20")
    assert rc == 0, doc
    lines = out.read_text().splitlines()
    assert lines.count("job 15") == 1, lines
    assert "helper up" in lines
    assert lines.count("helper 15") <= 1, lines
    for f in doc["result"]["processes"]:
        assert f["signals"].count("SIGTERM") <= 1, f
        assert len(f["signals"]) <= 2 and f["signals"][-1:] != ["SIGTERM", "SIGTERM"], f


# --- only ESRCH means gone -------------------------------------------------------------------

def _low_fd_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))


def test_kill_under_a_low_fd_limit_never_calls_the_living_dead(cli, tmp_path):
    """With few descriptors pidfd_open fails with EMFILE: those processes must still be
    signalled and watched (by pid and start time), and reported dead only once seen dead."""
    token = "98765%d" % os.getpid()
    procs = [subprocess.Popen(["sleep", token]) for _ in range(60)]
    try:
        wait_for(lambda: all(read_stat(p.pid) for p in procs), what="sleepers")
        p = subprocess.run(cli.argv("kill", f"sleep {token}", "--yes", "--max-procs", "100", "--grace", "5", "--json"),
                           cwd=cli.cwd, env=cli.env, capture_output=True, text=True, timeout=120,
                           preexec_fn=_low_fd_limit)
        doc = json.loads(p.stdout)
        for q in procs:
            q.poll()  # reap what died, so "alive" below is the kernel's truth
        living = [q.pid for q in procs if q.returncode is None and alive(q.pid)]
        if doc["result"].get("verified_dead"):
            assert not living, f"verified_dead, yet {len(living)} of 60 live: {living[:5]}"
        assert not living, (p.returncode, doc)
        assert p.returncode == 0, doc
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.wait()


# --- the run's session and group stay part of it ------------------------------------------

NONROOT = "rwtrust"


@pytest.fixture
def nonroot(tmp_path):
    """A CLI runner as an ordinary user: no cgroup of its own, so only the session and
    group (and the marker) can find what the job left behind."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create and switch to an ordinary user")
    py = shutil.which("python3", path="/usr/bin:/bin")
    if not py:
        pytest.skip("no system python3 for the ordinary user")
    try:
        pw = pwd.getpwnam(NONROOT)
    except KeyError:
        subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", NONROOT], check=True)
        pw = pwd.getpwnam(NONROOT)
    base = Path(f"/tmp/rwtrust-{os.getpid()}-{tmp_path.name}")
    base.mkdir(mode=0o700)
    os.chown(base, pw.pw_uid, pw.pw_gid)

    def run(*args, timeout=120):
        env = {"PATH": "/usr/bin:/bin", "RUNWARD_HOME": str(base / "home"), "PYTHONPATH": world_readable_src(),
               "HOME": str(base), "LANG": "C.UTF-8"}
        return subprocess.run([py, "-m", "runward", *args], cwd=base, env=env, capture_output=True, text=True,
                              timeout=timeout, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])

    probe = run("--help")
    if probe.returncode != 0:
        pytest.skip(f"the ordinary user cannot run runward from {ROOT}: {probe.stderr[-300:]}")
    yield run, base
    subprocess.run(["pkill", "-KILL", "-u", NONROOT])
    shutil.rmtree(base, ignore_errors=True)


def _pids_of_user(uid: int, needle: bytes) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid != uid:
                    continue
                if needle in Path(f"/proc/{d}/cmdline").read_bytes():
                    st = read_stat(int(d))
                    if st and st[0] != "Z":
                        out.append(int(d))
            except OSError:
                pass
    return out


def test_session_member_that_cleared_its_env_outlives_the_leader(nonroot):
    """Without a cgroup, a child that cleared its environment and stays in the job's session
    is found by status (stray processes alive, not plain "exited") and ended by stop."""
    run, base = nonroot
    uid = pwd.getpwnam(NONROOT).pw_uid
    token = b"876543%d" % os.getpid()
    p = run("start", "sess", "--settle", "0.2", "--json", "--sh",
            f"env -i /bin/sleep {token.decode()} & sleep 1; exit 0")
    assert p.returncode == 0, p.stdout + p.stderr
    leader = json.loads(p.stdout)["result"]["pid"]
    # the leader's own command line carries the token too: it is the job, not a stray
    stray = wait_for(lambda: [q for q in _pids_of_user(uid, token) if q != leader], what="the env -i child")
    # the leader exits after a second; the child stays in its session and group
    wait_for(lambda: json.loads(run("status", "sess", "--json").stdout)["result"]["runs"][0].get("exit"),
             what="the leader's exit recorded")
    st = json.loads(run("status", "sess", "--json").stdout)["result"]["runs"][0]
    assert set(stray) <= set(st.get("stray_processes") or []), st
    assert st["state"] != "exited", st
    p = run("stop", "sess", "--grace", "5", "--json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["result"]["verified_dead"] and not doc["result"]["already_stopped"], doc
    assert not [q for q in stray if alive(q)], stray


# --- a dead shim is not a dead job --------------------------------------------------------

def _kill_shim_when_recorded(cli, name):
    shim = wait_for(lambda: attempt_record(cli, name).get("shim"), what="the shim's record")
    job = wait_for(lambda: attempt_record(cli, name).get("job"), what="the job's record")
    os.kill(shim["pid"], signal.SIGKILL)
    return shim, job


def test_shim_killed_during_settle_is_not_an_early_exit(cli):
    pop = cli.popen("start", "sh1", "--settle", "3", "--json", "--", "sleep", "600")
    shim, job = _kill_shim_when_recorded(cli, "sh1")
    out, err = pop.communicate(timeout=60)
    doc = json.loads(out)
    assert alive(job["pid"], job["start"])
    assert pop.returncode == 5, doc  # done, not verified: the job lives, unsupervised
    assert doc["ok"] is False or doc["result"].get("alive_after_settle") is not False, doc
    text = json.dumps(doc)
    assert "exited during the settle period" not in text
    assert "orphan" in text, doc
    st = cli.status("sh1")
    assert st["state"] == "orphaned" and st["pid"] == job["pid"]
    rc, doc = cli.json("stop", "sh1", "--grace", "5")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not alive(job["pid"], job["start"])
    st = cli.status("sh1")
    assert st["state"] not in ("lost", "running", "orphaned"), st


def test_shim_killed_after_settle_is_an_orphan_not_an_exit(cli):
    rc, doc = cli.json("start", "sh2", "--settle", "0.2", "--", "sleep", "600")
    assert rc == 0, doc
    shim, job = _kill_shim_when_recorded(cli, "sh2")
    wait_for(lambda: not alive(shim["pid"], shim["start"]), what="the shim gone")
    st = cli.status("sh2")
    assert st["state"] == "orphaned" and "exit" not in st, st
    assert alive(job["pid"], job["start"])
    rc, doc = cli.json("stop", "sh2", "--grace", "5")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    st = cli.status("sh2")
    # stop sent TERM; how the job ended only its (dead) shim could have seen: unknown
    assert st["state"] == "exited" and st["exit"]["unknown"] and st["exit"]["signal"] is None, st
    assert st["exit"]["signals_sent"] == ["SIGTERM"], st


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


# --- a planted symlink never redirects a write --------------------------------------------

def _plant(dirpath: Path, base: str, target: Path, owner: int | None) -> int:
    """Symlinks to target under every name a temp file beside dirpath/base could take now:
    '.<base>.<anything>.<pid>' for the next pids, and a few fixed spellings."""
    with open("/proc/loadavg") as f:
        last = int(f.read().split()[-1])
    names = [f".{base}.runward-tmp.{pid}" for pid in range(last, last + 600)]
    names += [f".{base}.tmp.{pid}" for pid in range(last, last + 600)]
    names += [f"{base}.tmp", f".{base}.tmp", f"{base}~"]
    for n in names:
        p = dirpath / n
        os.symlink(target, p)
        if owner is not None:
            os.lchown(p, owner, owner)
    return len(names)


@ROOT_ONLY
@pytest.mark.parametrize("kind", ["sticky", "owned_by_other"])
def test_push_never_follows_a_planted_symlink(cli, tmp_path, kind):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    nobody = pwd.getpwnam("nobody").pw_uid
    d = Path(f"/tmp/rwplant-{os.getpid()}-{kind}")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    try:
        if kind == "sticky":
            os.chmod(d, 0o1777)
            _plant(d, "model.py", victim, None)
        else:
            os.chown(d, nobody, nobody)
            os.chmod(d, 0o755)
            _plant(d, "model.py", victim, nobody)
        src = tmp_path / "model.py"
        src.write_text("new code\n")
        rc, doc = cli.json("push", f"{src}:{d}/model.py")
        assert victim.read_text() == "precious\n"
        assert oct(victim.stat().st_mode & 0o7777) != "0o644" or True
        dest = d / "model.py"
        if rc == 0:
            assert not dest.is_symlink() and dest.read_text() == "new code\n", doc
        else:
            assert "sha256 verified" not in json.dumps(doc)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@ROOT_ONLY
def test_push_of_a_directory_never_goes_through_a_planted_link(cli, tmp_path):
    """A directory pushed into a sticky /tmp-like directory, where someone planted a symlink
    under its name: neither its mode nor its files go where the link points."""
    victim = tmp_path / "victim_dir"
    victim.mkdir(mode=0o700)
    d = Path(f"/tmp/rwplantdir-{os.getpid()}")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    try:
        os.chmod(d, 0o1777)
        os.symlink(victim, d / "conf")
        src = tmp_path / "conf"
        src.mkdir(mode=0o755)
        (src / "authorized_keys").write_text("planted\n")
        rc, doc = cli.json("push", f"{src}/:{d}/conf/")
        assert rc != 0 and "symbolic link" in doc["error"]["message"], doc
        assert oct(victim.stat().st_mode & 0o7777) == "0o700" and not list(victim.iterdir())
    finally:
        shutil.rmtree(d, ignore_errors=True)


@ROOT_ONLY
def test_log_in_a_foreign_directory_is_never_written_through_a_link(cli, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    nobody = pwd.getpwnam("nobody").pw_uid
    d = Path(f"/tmp/rwplantlog-{os.getpid()}")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    try:
        os.chown(d, nobody, nobody)
        os.symlink(victim, d / "train.log")
        os.lchown(d / "train.log", nobody, nobody)
        rc, doc = cli.json("start", "lg", "--settle", "0.2", "--log", str(d / "train.log"), "--", "sleep", "600")
        assert victim.read_text() == "precious\n", doc
        assert rc != 0, doc
        assert rc == 2 and str(d / "train.log") in doc["error"]["message"], doc
        assert not (cli.home / "runs" / "lg").exists() and not marked("lg.")
    finally:
        shutil.rmtree(d, ignore_errors=True)


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


# --- records and locks ----------------------------------------------------------------------

def test_a_verb_waiting_for_the_run_lock_names_the_holder_and_gives_up(cli):
    """A verb behind another's lock used to wait silently and forever. Now it says, within a
    second, which verb holds it (verb, pid, since when), and gives up after --lock-timeout."""
    rc, doc = cli.json("start", "lk", "--settle", "0.2", "--sh", "trap '' TERM; while :; do sleep 0.1; done")
    assert rc == 0, doc
    first = cli.popen("stop", "lk", "--grace", "8", "--json")  # holds the lock through its grace
    try:
        lock = cli.home / "runs" / ".lk.lock"
        wait_for(lambda: lock.stat().st_size > 0, what="the first stop's name in the lock file")
        t0 = time.monotonic()
        p = subprocess.Popen(cli.argv("stop", "lk", "--lock-timeout", "2", "--json"), cwd=cli.cwd, env=cli.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said = p.stderr.readline()
        said_after = time.monotonic() - t0
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
        assert said_after < 1.9 and "lock" in said and "stop" in said, said
        assert "pid" in said and "since" in said, said
        assert p.returncode == 1, (out, said + err)
        assert 1.5 < took < 10, took
        assert "lock" in json.loads(out)["error"]["message"]
    finally:
        out, _ = first.communicate(timeout=60)
    assert json.loads(out)["result"]["verified_dead"], out


def test_a_stop_during_the_settle_period_cancels_the_start(cli):
    """The start watching its job settle no longer holds the lock: a stop then is no early
    exit of the job but a cancelled start (exit 1, type Cancelled), said as such at once."""
    pop = cli.popen("start", "sc", "--settle", "30", "--json", "--", "sleep", "600")
    try:
        job = wait_for(lambda: attempt_record(cli, "sc").get("job"), what="the job's record")
        rc, doc = cli.json("stop", "sc", "--grace", "5")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        t0 = time.monotonic()
        out, err = pop.communicate(timeout=20)
        assert time.monotonic() - t0 < 10
    finally:
        if pop.poll() is None:
            pop.kill()
            pop.wait()
    doc = json.loads(out)
    assert pop.returncode == 1 and doc["error"]["type"] == "Cancelled", doc
    assert "stopped by `runward stop` during the settle period" in doc["error"]["message"], doc
    assert "exited during the settle period" not in json.dumps(doc)
    assert not alive(job["pid"], job["start"])
    assert attempt_record(cli, "sc").get("stop_requested"), attempt_record(cli, "sc")
    assert cli.status("sc")["state"] == "exited"


def test_replace_uses_the_old_attempts_grace(cli, tmp_path):
    """The old job needs its own (long) grace to checkpoint; --replace must not cut it short
    with the new request's default."""
    script = tmp_path / "slowckpt.py"
    script.write_text(textwrap.dedent("""
        import signal, sys, time
        def on(s, f):
            time.sleep(2.5); print("checkpoint saved", flush=True); sys.exit(0)
        signal.signal(signal.SIGTERM, on)
        print("up", flush=True)
        while True: time.sleep(0.1)
    """))
    rc, doc = cli.json("start", "rp", "--settle", "0.3", "--grace", "20", "--", PY, str(script))
    assert rc == 0, doc
    rc, doc = cli.json("start", "rp", "--settle", "0.3", "--replace", "--grace", "1", "--", PY, str(script))
    assert rc == 0, doc
    rep = doc["result"]["replaced"]
    assert rep["grace_s"] == 20, rep
    assert any(f["fate"].startswith("exited_after") for f in rep["processes"]), rep
    cli.json("stop", "rp", "--grace", "10")


@ROOT_ONLY
def test_disk_full_keeps_the_old_record_whole(cli, tmp_path):
    """On ENOSPC a record is never torn: what was there stays whole, nothing half-made is
    left, and the verb says the disk is full (exit 1)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)])
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        cli.env["RUNWARD_HOME"] = str(mnt / "home")
        rc, doc = cli.json("start", "df", "--settle", "0.2", "--log", str(tmp_path / "df.log"), "--", "sleep", "600")
        assert rc == 0, doc
        run_json = mnt / "home" / "runs" / "df" / "run.json"
        before = {p: p.read_bytes() for p in (mnt / "home").rglob("*") if p.is_file()}
        # unbuffered: a buffered file still holds the bytes that did not fit, and its close
        # would raise ENOSPC again
        with open(mnt / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        rc, doc = cli.json("start", "df2", "--settle", "0.2", "--log", str(tmp_path / "df2.log"), "--", "sleep", "600")
        assert rc == 1, doc
        assert "disk full" in doc["error"]["message"], doc
        after = {p: p.read_bytes() for p in (mnt / "home").rglob("*") if p.is_file() and ".lock" not in p.name}
        assert {p: b for p, b in before.items() if ".lock" not in p.name} == after
        json.loads(run_json.read_text())
        assert not marked("df2.")
        assert not (mnt / "home" / "runs" / "df2").exists()
        os.unlink(mnt / "filler")
        assert cli.status("df")["state"] == "running"
        rc, doc = cli.json("start", "df2", "--settle", "0.2", "--log", str(tmp_path / "df2.log"), "--", "sleep", "600")
        assert rc == 0, doc
        for n in ("df", "df2"):
            rc, doc = cli.json("stop", n, "--grace", "5")
            assert rc == 0, doc
    finally:
        for pref in ("df.", "df2."):
            for pid in marked(pref):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        subprocess.run(["umount", "-l", str(mnt)])


def test_a_kill_sent_by_runwards_own_stop_is_no_oom_alert(cli):
    """stop's KILL after the grace of a TERM-ignoring job: the job ended by SIGKILL, but not
    the OOM killer's; status must not guess "possibly OOM-killed" (hostile review F5). A job
    SIGKILLed from outside still gets the guess."""
    rc, doc = cli.json("start", "stopkill", "--settle", "0.3", "--grace", "1", "--sh", 'trap "" TERM; exec sleep 600')
    assert rc == 0, doc
    rc, doc = cli.json("stop", "stopkill")
    assert rc == 0 and any(p["fate"] == "killed" for p in doc["result"]["processes"]), doc
    st = cli.status("stopkill")
    kinds = [a["kind"] for a in (st.get("health") or {}).get("alerts") or []]
    assert "oom_killed" not in kinds and "OOM" not in cli.run("status", "stopkill").stdout, st
    rc, doc = cli.json("start", "outkill", "--settle", "0.3", "--", "sleep", "600")
    assert rc == 0, doc
    os.kill(doc["result"]["pid"], signal.SIGKILL)
    st = wait_for(lambda: (lambda s: s if s["state"] == "exited" else None)(cli.status("outkill")), what="the exit")
    assert "oom_killed" in [a["kind"] for a in (st.get("health") or {}).get("alerts") or []], st
