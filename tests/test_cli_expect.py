"""The CLI as people expect it (issue 20, stumbles 3, 4, 6, 7, 8, 10, 11): restart follows
runward.toml and says what changed, status in a project, "did you mean", argument errors as
JSON, Ctrl-C during start, a closed pipe, unknown target names, flags named by meaning.

Real processes throughout: jobs on this machine, their environment read from /proc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import alive, marked, wait_for
from runward import cli as cli_mod


def environ(pid: int) -> dict:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode().split("=", 1) for item in raw.split(b"\0") if b"=" in item)


def toml(cli, text: str) -> None:
    (cli.cwd / "runward.toml").write_text(text)


# --------------------------------------------------------------------------- 3. restart


def test_restart_takes_runward_toml_and_drops_the_last_env_override(cli, tmp_path):
    toml(cli, '[runs.tr]\ncommand = ["sleep", "300"]\nsettle = 0.2\nenv = { LR = "3e-4", KEEP = "k" }\n')
    rc, doc = cli.json("start", "tr", "--env", "TRAIN_NAN_AT=5")
    assert rc == 0, doc
    assert environ(doc["result"]["pid"])["TRAIN_NAN_AT"] == "5"
    # the toml changes: a new env value, an entry gone, another cwd and command
    toml(cli, f'[runs.tr]\ncommand = ["sleep", "301"]\nsettle = 0.2\ncwd = "{tmp_path}"\nenv = {{ LR = "1e-4" }}\n')
    rc, doc = cli.json("restart", "tr")
    assert rc == 0, doc
    res = doc["result"]
    env = environ(res["pid"])
    assert "TRAIN_NAN_AT" not in env and "KEEP" not in env and env["LR"] == "1e-4"
    assert os.readlink(f"/proc/{res['pid']}/cwd") == str(tmp_path)
    assert Path(f"/proc/{res['pid']}/cmdline").read_bytes() == b"sleep\x00301\x00"
    ch = res["changed"]
    assert res["spec_from"] == "runward.toml" and res["last_attempt"] == 1
    assert ch["env"]["removed"] == ["KEEP", "TRAIN_NAN_AT"]
    assert ch["env"]["changed"] == {"LR": {"from": "3e-4", "to": "1e-4"}}
    assert ch["command"] == {"from": "sleep 300", "to": "sleep 301"}
    assert ch["cwd"] == {"from": str(cli.cwd), "to": str(tmp_path)}  # the first: beside runward.toml
    p = cli.run("restart", "tr")  # nothing changed since: said so
    assert p.returncode == 0 and "unchanged since attempt 2" in p.stdout, p.stdout + p.stderr


def test_restart_env_unset_and_keep_env(cli):
    toml(cli, '[runs.ke]\ncommand = ["sleep", "300"]\nsettle = 0.2\nenv = { A = "1" }\n')
    rc, doc = cli.json("start", "ke", "--env", "HF_TOKEN=tok-93a1", "--env", "X=x")
    assert rc == 0, doc
    rc, doc = cli.json("restart", "ke", "--keep-env", "--env", "X=")
    assert rc == 0, doc
    env = environ(doc["result"]["pid"])
    # the typed secret kept (never having left the target), X unset, A from the toml
    assert env["HF_TOKEN"] == "tok-93a1" and "X" not in env and env["A"] == "1"
    assert doc["result"]["changed"] == {"env": {"removed": ["X"]}}
    assert "tok-93a1" not in json.dumps(doc)
    p = cli.run("restart", "ke", "--env", "A=")
    assert p.returncode == 0, p.stderr
    assert "env: -A (unset), -HF_TOKEN (unset)" in p.stdout, p.stdout
    pid = cli.status("ke")["pid"]
    assert "A" not in environ(pid) and "HF_TOKEN" not in environ(pid)


def test_a_run_started_by_flags_alone_keeps_its_spec_and_can_unset(cli, tmp_path):
    rc, doc = cli.json("start", "fl", "--settle", "0.2", "--env", "TRAIN_NAN_AT=5", "--env", "B=2",
                       "--", "sleep", "300")
    assert rc == 0, doc
    rc, doc = cli.json("restart", "fl", "--settle", "0.2", "--cwd", str(tmp_path), "--ready-timeout", "5")
    assert rc == 0, doc
    assert environ(doc["result"]["pid"])["TRAIN_NAN_AT"] == "5"
    assert doc["result"]["spec_from"] == "last attempt" and set(doc["result"]["changed"]) == {"cwd", "options"}
    assert doc["result"]["changed"]["options"] == {"ready_timeout": {"from": 600.0, "to": 5.0}}
    assert os.readlink(f"/proc/{doc['result']['pid']}/cwd") == str(tmp_path)
    rc, doc = cli.json("restart", "fl", "--settle", "0.2", "--env", "TRAIN_NAN_AT=")
    assert rc == 0, doc
    env = environ(doc["result"]["pid"])
    assert "TRAIN_NAN_AT" not in env and env["B"] == "2"


# --------------------------------------------------------------------------- 4. status, names


def test_status_in_a_project_lists_runward_toml_targets(cli, tmp_path):
    homes = {t: tmp_path / f"home-{t}" for t in ("ta", "tb")}
    toml(cli, "".join(f'[targets.{t}]\non = "local"\nhome = "{h}"\n' for t, h in homes.items())
         + '[runs.ra]\non = "ta"\ncommand = ["sleep", "300"]\nsettle = 0.2\n'
         + '[runs.rb]\non = "tb"\ncommand = ["sleep", "300"]\nsettle = 0.2\n')
    for run in ("ra", "rb"):
        rc, doc = cli.json("start", run)
        assert rc == 0, doc
    try:
        rc, doc = cli.json("status")
        assert rc == 0, doc
        runs = {r["name"]: t["target"] for t in doc["targets"] for r in t["result"]["runs"]}
        assert runs == {"ra": "ta (local)", "rb": "tb (local)"}
        p = cli.run("status")
        assert "no runs on local" not in p.stdout and "== ta" in p.stdout and "rb " in p.stdout
    finally:
        for run in ("ra", "rb"):
            cli.run("stop", run)


def test_unknown_names_get_did_you_mean(cli):
    toml(cli, '[runs.train]\ncommand = ["sleep", "300"]\nsettle = 0.2\nfiles = ["a.py:/tmp/a.py"]\n')
    rc, doc = cli.json("start", "train")
    assert rc == 0, doc
    for verb in (["status"], ["stop"], ["restart"], ["logs"], ["watch", "--for", "1"]):
        rc, doc = cli.json(verb[0], "trian", *verb[1:])
        assert rc == 4 and "did you mean train?" in doc["error"]["hint"], (verb, doc)
    p = cli.run("deploy", "trian")
    assert p.returncode == 2 and "did you mean train?" in p.stderr and "[runs.trian]" not in p.stderr, p.stderr
    # a run only on the target, not in runward.toml, is suggested too
    rc, doc = cli.json("start", "evalrun", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0
    rc, doc = cli.json("status", "evalrnu")
    assert rc == 4 and "did you mean evalrun?" in doc["error"]["hint"]


# --------------------------------------------------------------------------- 6. arguments


def test_an_argument_error_with_json_is_one_document_with_the_dash_dash_hint(cli):
    rc, doc = cli.json("start", "x", "python3", "-c", "print(1)")
    assert rc == 2 and doc["ok"] is False and doc["error"]["type"] == "BadInput", doc
    assert "unrecognized arguments" in doc["error"]["message"] and "put the command after --" in doc["error"]["hint"]
    p = cli.run("start", "x", "python3", "-c", "print(1)")
    assert p.returncode == 2 and "put the command after --" in p.stderr
    rc, doc = cli.json("stop")  # a missing argument, too
    assert rc == 2 and doc["error"]["type"] == "BadInput" and doc["command"] == "stop"


def test_start_name_alone_starts_a_run_of_runward_toml_else_says_both_ways(cli):
    rc, doc = cli.json("start", "nocmd")
    assert rc == 2 and "-- COMMAND" in doc["error"]["hint"] and "runward.toml" in doc["error"]["hint"]
    toml(cli, '[runs.nocmd]\ncommand = ["sleep", "300"]\nsettle = 0.2\n')
    rc, doc = cli.json("start", "nocmd")
    assert rc == 0 and doc["result"]["alive_after_settle"], doc


# --------------------------------------------------------------------------- 7. Ctrl-C


def _interrupt(proc: subprocess.Popen) -> tuple[int, str, str]:
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def test_ctrl_c_during_start_says_the_job_runs(cli):
    proc = cli.popen("start", "cc", "--settle", "60", "--", "sleep", "300", start_new_session=True)
    job = wait_for(lambda: marked("cc.1"), what="the job to run")
    rc, out, err = _interrupt(proc)
    (pid, start), = job.items()
    assert rc == 130, (out, err)
    # the agent's "started" event, or (interrupted just before it came) the target asked
    assert (f"interrupted; cc attempt 1 is running, pid {pid}" in err
            or f"the target says cc attempt 1 is running now, pid {pid}" in err) and "runward status cc" in err, err
    assert "Traceback" not in err and alive(pid, start), "the job must keep running"
    proc = cli.popen("start", "cc2", "--json", "--settle", "60", "--", "sleep", "300", start_new_session=True)
    wait_for(lambda: marked("cc2.1"), what="the second job")
    rc, out, err = _interrupt(proc)
    doc = json.loads(out)
    assert rc == 130 and doc["error"]["type"] == "Interrupted" and doc["result"]["attempt"] == 1, doc
    assert doc["result"]["seen_by"] in ("started event", "status"), doc


def test_ctrl_c_after_the_launch_before_its_event_gives_the_attempt_the_target_says(cli):
    # the shim holds between recording the job and telling the agent: the job runs, the CLI
    # has heard nothing; its --json must still carry the attempt and pid (CI hit this race)
    pause = cli.home / "fault-pause"
    cli.env["RUNWARD_FAULT"] = "pause:shim:job-recorded"
    proc = cli.popen("start", "ce", "--json", "--settle", "60", "--", "sleep", "300", start_new_session=True)
    try:
        job = wait_for(lambda: pause.exists() and marked("ce.1"), what="the shim to hold after the launch")
        (pid, start), = job.items()
        del cli.env["RUNWARD_FAULT"]
        rc, out, err = _interrupt(proc)
        doc = json.loads(out)
        assert rc == 130 and doc["error"]["type"] == "Interrupted", doc
        assert doc["result"] == {"attempt": 1, "pid": pid, "name": "ce", "seen_by": "status"}, doc
        assert "the target says ce attempt 1 is running now" in doc["error"]["message"], doc
        assert alive(pid, start), "the job must keep running"
    finally:
        pause.unlink(missing_ok=True)
        for pid, start in marked("ce.").items():
            if alive(pid, start):
                os.kill(pid, signal.SIGKILL)


def test_ctrl_c_before_the_job_is_launched_says_nothing_was_started(cli, tmp_path):
    # a run whose stop takes its whole grace holds the run lock; a start --replace waits for it
    rc, doc = cli.json("start", "lk", "--settle", "0.2", "--sh", "trap '' TERM; exec sleep 300")
    assert rc == 0, doc
    record = cli.home / "runs" / "lk" / "attempts" / "1.json"
    stopper = cli.popen("stop", "lk", "--grace", "60")
    errfile = tmp_path / "start.err"
    try:
        wait_for(lambda: "stop_requested" in record.read_text(), what="the stop to hold the run")
        with open(errfile, "w") as err:
            proc = subprocess.Popen(cli.argv("start", "lk", "--replace", "--lock-timeout", "60", "--", "sleep", "300"),
                                    cwd=cli.cwd, env=cli.env, stdout=subprocess.PIPE, stderr=err, text=True,
                                    start_new_session=True)
        wait_for(lambda: "waiting for run lk" in errfile.read_text(), what="the start to wait for the lock")
        rc, _, _ = _interrupt(proc)
        text = errfile.read_text()
        # never "lk attempt 2 is running": the old attempt 1 still runs (its stop is in its grace)
        assert rc == 130 and "interrupted before" in text and "runward status lk" in text, text
        assert "attempt 2" not in text and "interrupted;" not in text, text
        assert "Traceback" not in text
    finally:
        for pid, start in marked("lk.").items():
            if alive(pid, start):
                os.kill(pid, signal.SIGKILL)
        stopper.communicate(timeout=60)
    assert not marked("lk.2") and not (cli.home / "runs" / "lk" / "attempts" / "2.json").exists()


# --------------------------------------------------------------------------- 8. closed pipe


def agents_of(home: Path) -> list[int]:
    """Agents (not shims) of this home still running: a follower must not outlive its CLI."""
    pids = []
    for d in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            env = Path(f"/proc/{d}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"marshal" in cmd and b"runward-shim" not in cmd and b"RUNWARD_HOME=%s" % bytes(home) in env:
            pids.append(int(d))
    return pids


@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["ps", "."], ["lint", "pkill -f x"],
                                  ["exec", "--", "echo", "hi"], ["logs", "bp"], ["logs", "-f", "bp"], ["--help"]])
def test_a_closed_reader_ends_runward_as_it_ends_git(cli, args):
    rc, doc = cli.json("start", "bp", "--settle", "0.2", "--sh", "echo a line; exec sleep 300")
    assert rc == 0
    r, w = os.pipe()
    os.close(r)  # the reader is gone before a byte is written: `| head -0`, deterministically
    try:
        p = subprocess.run(cli.argv(*args), cwd=cli.cwd, env=cli.env, stdout=w, stderr=subprocess.PIPE,
                           timeout=60)
    finally:
        os.close(w)
    # git dies of SIGPIPE in a pipeline (the shell shows 141); no traceback, no word. (--help
    # leaves through argparse's exit, whose output the interpreter drops quietly: 0.)
    assert p.returncode == (0 if args == ["--help"] else -signal.SIGPIPE), (p.returncode, p.stderr)
    assert p.stderr == b""
    wait_for(lambda: not agents_of(cli.home), what="no agent left behind (logs -f's follower)")


# --------------------------------------------------------------------------- 10. target names


def test_an_undefined_target_name_is_named_with_the_known_ones(cli):
    toml(cli, '[targets.box]\non = "ssh://127.0.0.1"\n[targets.pct]\non = "podman:c1"\n'
              '[runs.g9]\non = "gpu9"\ncommand = ["true"]\n')
    for args in (["status", "--on", "gpu9"], ["start", "g9"]):
        rc, doc = cli.json(*args)
        assert rc == 2 and doc["error"]["message"].startswith("no target gpu9 (known: box, pct)"), doc
        assert "[targets.gpu9]" in doc["error"]["hint"] and "invalid hop" not in json.dumps(doc)
    rc, doc = cli.json("status", "--on", "bxo")
    assert rc == 2 and "did you mean box?" in doc["error"]["hint"]


# --------------------------------------------------------------------------- 11. flags


def _verb_parsers():
    ap = cli_mod.build_parser()
    return next(a for a in ap._actions if a.dest == "cmd").choices


def test_every_flag_of_every_verb_has_help():
    missing = [f"{verb} {'/'.join(a.option_strings)}" for verb, p in _verb_parsers().items()
               for a in p._actions if a.option_strings and not a.help]
    assert not missing, f"flags without help: {missing}"


@pytest.mark.parametrize("verb,old,new,dest,value", [
    ("start", "--timeout", "--gpu-wait-timeout", "gpu_wait_timeout", "7"),
    ("stop", "--signal", "--stop-signal", "stop_signal", "INT"),
    ("stop", "--gpu-timeout", "--gpu-release-timeout", "gpu_release_timeout", "7"),
    ("restart", "--signal", "--stop-signal", "stop_signal", "INT"),
    ("kill", "--max", "--max-procs", "max_procs", "7"),
])
def test_renamed_flags_keep_their_old_spelling_hidden(verb, old, new, dest, value):
    p = _verb_parsers()[verb]
    pos = {"start": ["n"], "stop": ["n"], "restart": ["n"], "kill": ["pat"]}[verb]
    for flag in (old, new):
        got = getattr(p.parse_args([*pos, flag, value]), dest)
        assert str(got) in (value, value + ".0")
    text = p.format_help()
    assert new in text and f"{old} " not in text.replace(new, "")


def test_restart_takes_cwd_and_ready_timeout_and_ps_has_a_header(cli):
    p = _verb_parsers()["restart"]
    a = p.parse_args(["n", "--cwd", "/tmp", "--ready-timeout", "5", "--keep-env"])
    assert (a.cwd, a.ready_timeout, a.keep_env) == ("/tmp", 5.0, True)
    rc, doc = cli.json("start", "hdr", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0
    p = cli.run("ps", "sleep 300")
    assert p.returncode == 0 and p.stdout.splitlines()[0].split() == ["PID", "STARTED", "USER", "RUN", "COMMAND"]


def _record(cli, name: str, n: int = 1) -> dict:
    try:
        return json.loads((cli.home / "runs" / name / "attempts" / f"{n}.json").read_text())
    except (OSError, ValueError):
        return {}


def test_ctrl_c_during_a_restarts_start_says_the_new_attempt_runs(cli):
    rc, doc = cli.json("start", "rs", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0, doc
    proc = cli.popen("restart", "rs", "--json", "--settle", "60", start_new_session=True)
    job = wait_for(lambda: marked("rs.2"), what="the new attempt to run")
    rc, out, err = _interrupt(proc)
    (pid, start), = job.items()
    doc = json.loads(out)
    assert rc == 130 and doc["error"]["type"] == "Interrupted", doc
    assert doc["result"]["interrupted_in"] == "start" and doc["result"]["pid"] == pid, doc
    assert f"attempt 2 is running, pid {pid}" in doc["error"]["message"], doc
    assert "old one was stopped" in doc["error"]["message"] and alive(pid, start)
    assert not marked("rs.1"), "the old attempt must be dead"


def test_ctrl_c_during_a_restarts_stop_says_it_goes_on_and_nothing_is_started(cli):
    rc, doc = cli.json("start", "rt", "--settle", "0.2", "--grace", "3", "--sh", 'trap "" TERM; exec sleep 600')
    assert rc == 0, doc
    old = (doc["result"]["pid"], doc["result"]["start_time"])
    proc = cli.popen("restart", "rt", start_new_session=True)
    wait_for(lambda: _record(cli, "rt").get("stop_requested") or proc.poll() is not None,
             what="the restart's stop to begin")
    rc, out, err = _interrupt(proc)
    assert rc == 130 and "interrupted during the stop" in err and "nothing will be started" in err, err
    assert "Traceback" not in err
    wait_for(lambda: not alive(*old), timeout=20, what="the TERM-ignoring job dead after its grace")
    wait_for(lambda: (_record(cli, "rt").get("stopped") or {}).get("verified_dead"), timeout=15,
             what="the stop's verified end recorded")
    assert not (cli.home / "runs" / "rt" / "attempts" / "2.json").exists(), "nothing may be started"


def test_ctrl_c_during_kill_yes_says_it_goes_on_and_it_does(cli, tmp_path):
    """A kill --yes interrupted in its grace: it said only "interrupted", and its agent died
    with the CLI, so a TERM-ignoring match was never KILLed (issue 31 item 1, every verb)."""
    import uuid
    token = "rwkc" + uuid.uuid4().hex[:8]
    got = tmp_path / "got-term"
    rc, doc = cli.json("start", "kc", "--settle", "0.2",
                       "--sh", f'trap "echo x > {got}" TERM; while :; do sleep 1; done # {token}')
    assert rc == 0, doc
    job = (doc["result"]["pid"], doc["result"]["start_time"])
    proc = cli.popen("kill", token, "--yes", "--grace", "3", start_new_session=True)
    wait_for(lambda: got.exists() or proc.poll() is not None, what="the kill's TERM to arrive")
    rc, out, err = _interrupt(proc)
    assert rc == 130 and "goes on on the target" in err and f"runward ps {token}" in err, err
    assert "Traceback" not in err
    wait_for(lambda: not alive(*job), timeout=20, what="the TERM-ignoring match KILLed after the grace")


def test_ctrl_c_during_exec_says_the_command_may_still_run(cli):
    """exec's command has a session of its own: Ctrl-C said only "interrupted" while it ran on."""
    import random
    arg = "3000.%06d" % random.randrange(10 ** 6)

    def running():
        for d in os.listdir("/proc"):
            try:
                if Path(f"/proc/{d}/cmdline").read_bytes() == b"sleep\0%s\0" % arg.encode():
                    return int(d)
            except OSError:
                pass
        return None
    proc = cli.popen("exec", "--", "sleep", arg, start_new_session=True)
    pid = wait_for(lambda: running(), what="exec's command to run")
    try:
        rc, out, err = _interrupt(proc)
        assert rc == 130 and "may still be running on the target" in err, err
        assert running() == pid  # what it said is so
    finally:
        os.kill(pid, signal.SIGKILL)


def test_ctrl_c_during_watch_and_logs_f_says_they_only_read(cli):
    rc, doc = cli.json("start", "wt", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0, doc
    proc = cli.popen("watch", "wt", "--for", "120", start_new_session=True)
    # watching: its agent runs as the CLI's child (the CLI is inside the verb, its handler set)
    wait_for(lambda: proc.poll() is not None or Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().strip(),
             what="watch's agent to run")
    rc, out, err = _interrupt(proc)
    assert rc == 130 and "watch only reads" in err and "Traceback" not in err, (out, err)
    assert marked("wt.1"), "the run goes on"
    proc = cli.popen("logs", "wt", "-f", start_new_session=True)
    wait_for(lambda: proc.poll() is not None or Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().strip(),
             what="the follower's agent to run")
    rc, out, err = _interrupt(proc)
    assert rc == 130 and "logs only reads" in err and "run goes on" in err, (out, err)
    assert marked("wt.1"), "the run goes on"


def test_ctrl_c_during_push_and_pull_says_what_is_left(cli, tmp_path):
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        for _ in range(384):
            f.write(os.urandom(1 << 20))
    dest = tmp_path / "far"
    dest.mkdir()
    (dest / "big.bin").write_bytes(b"old")
    proc = cli.popen("push", "--json", f"{src}:{dest}/big.bin", start_new_session=True)
    wait_for(lambda: any(dest.glob(".big.bin*")) or proc.poll() is not None, what="the push to write its temp file")
    rc, out, err = _interrupt(proc)
    doc = json.loads(out)
    assert rc == 130 and doc["error"]["type"] == "Interrupted" and "never torn" in doc["error"]["message"], doc
    after = (dest / "big.bin").read_bytes()
    assert after == b"old" or after == src.read_bytes()
    back = tmp_path / "back"
    back.mkdir()
    proc = cli.popen("pull", f"{src}:{back}/", start_new_session=True)
    wait_for(lambda: any(back.glob(".*")) or proc.poll() is not None, what="the pull to write its temp file")
    rc, out, err = _interrupt(proc)
    assert rc == 130 and "0 file(s) pulled" in err and "pull again" in err, err
    wait_for(lambda: not any(back.iterdir()), timeout=10, what="no temp file left")


def test_a_run_of_runward_toml_asked_on_another_target_points_to_its_own(cli):
    """`stop train --on HOST` where runward.toml runs train in a container on HOST: not found
    there, and the hint names the configured target instead of "runward status lists..."."""
    toml(cli, '[targets.box]\non = "podman:trainbox"\n\n[runs.train]\non = "box"\ncommand = ["sleep", "1"]\n')
    for verb in ("stop", "status", "logs"):
        rc, doc = cli.json(verb, "train", "--on", "local")
        assert rc == 4, doc
        assert "[runs.train] runs on box (podman:trainbox)" in doc["error"]["hint"], doc
        assert "--on box" in doc["error"]["hint"], doc
