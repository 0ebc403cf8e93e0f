"""restart and the code it runs: it says which files' sha256 changed since the last attempt
(issue 42, item 1), and refuses to run old code that came to the target some other way than
`deploy` (issue 39, item 4). Ground truth: the sha256 of the file where the job reads it (in
the container for a container) and the job's (pid, start time) in /proc by its marker."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid

import testbed
from conftest import alive, marked, sha
from podjob import JOB, only, pod, sha_in_pod  # noqa: F401  (pod: the fixture)


def _project(cli, name: str, dest: str, on: str | None = None) -> None:
    (cli.cwd / "job.py").write_text(JOB.format(v="v1"))
    (cli.cwd / "runward.toml").write_text(
        (getattr(cli, "toml_head", "")) + f'[runs.{name}]\n' + (f'on = "{on}"\n' if on else "")
        + f'command = ["{sys.executable if on is None else "python3"}", "{dest}/job.py"]\nfiles = ["job.py:{dest}/job.py"]\nsettle = 0.3\n')


def test_restart_names_each_file_whose_code_changed_and_says_when_none_did(cli, tmp_path):
    name = f"rcc{uuid.uuid4().hex[:6]}"
    dest = tmp_path / "deployed"
    _project(cli, name, str(dest))
    assert cli.json("deploy", name)[0] == 0
    rc, doc = cli.json("start", name)
    assert rc == 0, doc
    v1 = sha((dest / "job.py").read_bytes())
    (cli.cwd / "job.py").write_text(JOB.format(v="v2"))
    rc, doc = cli.json("restart", name, "--deploy")
    assert rc == 0, doc
    v2 = sha((dest / "job.py").read_bytes())
    assert v2 != v1 and v2 == sha((cli.cwd / "job.py").read_bytes())
    path = f"{dest}/job.py"
    res = doc["result"]
    assert res["code"]["changed"] == {path: {"from": v1, "to": v2}}, res
    assert res["changed"]["code"] == res["code"]["changed"], res
    job = only(marked(f"{name}.{res['attempt']}"))
    # nothing changed: said plainly, in the text a person reads too
    p = cli.run("restart", name)
    assert p.returncode == 0, p.stderr
    assert f"code: no file changed since attempt {res['attempt']}" in p.stdout and path in p.stdout, p.stdout
    assert not alive(*job) and sha((dest / "job.py").read_bytes()) == v2
    (cli.cwd / "job.py").write_text(JOB.format(v="v3"))
    p = cli.run("restart", name, "--deploy")
    assert p.returncode == 0, p.stderr
    v3 = sha((dest / "job.py").read_bytes())
    assert f"code: changed since attempt 3: {path} {v2[:8]} -> {v3[:8]}" in p.stdout, p.stdout
    cli.json("stop", name, "--grace", "2")


def test_restart_compares_files_never_deployed_with_the_targets_copy(cli, tmp_path):
    """The files came by hand (cp, as scp would): no deploy record. A local copy that differs
    from the target's is drift; one the target cannot read is not known to be the same."""
    name = f"rcu{uuid.uuid4().hex[:6]}"
    dest = tmp_path / "byhand"
    dest.mkdir()
    _project(cli, name, str(dest))
    shutil.copy(cli.cwd / "job.py", dest / "job.py")
    rc, doc = cli.json("start", name)
    assert rc == 0, doc
    job = only(marked(f"{name}.1"))
    (cli.cwd / "job.py").write_text(JOB.format(v="v2"))
    elsewhere = tmp_path / "wrong-place"
    elsewhere.mkdir()
    shutil.copy(cli.cwd / "job.py", elsewhere / "job.py")  # the fix went somewhere the job does not read
    v1 = sha((dest / "job.py").read_bytes())
    drift = cli.status(name).get("local_drift") or []  # status says it too
    assert [(d["remote"], d["target_sha256"]) for d in drift] == [(f"{dest}/job.py", v1)], drift
    assert "never deployed" in drift[0]["change"], drift
    rc, doc = cli.json("restart", name)
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    msg = doc["error"]["message"]
    assert f"{dest}/job.py" in msg and "never deployed" in msg and "--no-deploy" in doc["error"]["hint"], doc
    assert alive(*job) and sha((dest / "job.py").read_bytes()) == v1
    assert cli.status(name)["attempt"] == 1
    # the target's file cannot be read as a file: unknown, refused as drift is
    (dest / "job.py").rename(dest / "job.away")
    (dest / "job.py").mkdir()
    rc, doc = cli.json("restart", name)
    assert rc == 2 and "not known" in doc["error"]["message"] and f"{dest}/job.py" in doc["error"]["message"], doc
    assert alive(*job)
    (dest / "job.py").rmdir()
    (dest / "job.away").rename(dest / "job.py")
    # the fix put where the job reads it, by hand: no drift, and the restart says the code changed
    shutil.copy(cli.cwd / "job.py", dest / "job.py")
    rc, doc = cli.json("restart", name)
    assert rc == 0, doc
    assert doc["result"]["code"]["changed"] == {f"{dest}/job.py": {"from": v1, "to": sha((cli.cwd / "job.py").read_bytes())}}
    assert not alive(*job)
    cli.json("stop", name, "--grace", "2")


def test_a_fix_copied_to_the_host_instead_of_the_container_refuses_the_restart(pod):  # noqa: F811
    """The seed's story: the job runs in a container behind ssh; the patched file is copied to
    the host's path, not the container's. restart refuses (the container's copy differs), the
    job untouched and the container's file still the old one."""
    tb = testbed.load()
    name = f"rch{uuid.uuid4().hex[:6]}"
    dest = f"{pod.dir}/code"
    _project(pod, name, dest, on="h1pod")
    v1 = (pod.cwd / "job.py").read_bytes()
    put = subprocess.run(["podman", "exec", "-i", pod.container, "sh", "-c", f"mkdir -p {dest} && cat > {dest}/job.py"],
                         input=v1, env=pod.env, capture_output=True, timeout=60)
    assert put.returncode == 0, put.stderr
    try:
        rc, doc = pod.json("start", name)
        assert rc == 0, doc
        (pod.cwd / "job.py").write_text(JOB.format(v="v2"))
        host = subprocess.run(testbed.ssh_argv("rw1", f"mkdir -p {dest} && cat > {dest}/job.py", tb=tb),
                              input=(pod.cwd / "job.py").read_bytes(), capture_output=True, timeout=60)
        assert host.returncode == 0, host.stderr
        rc, doc = pod.json("restart", name)
        assert rc == 2 and f"{dest}/job.py" in doc["error"]["message"], doc
        assert "never deployed" in doc["error"]["message"], doc
        assert sha_in_pod(pod, f"{dest}/job.py") == sha(v1)
        rc, st = pod.json("status", name)
        assert rc == 0 and st["result"]["runs"][0]["attempt"] == 1 and st["result"]["runs"][0]["state"] == "running", st
    finally:
        pod.json("stop", name, "--grace", "2")
        subprocess.run(testbed.ssh_argv("rw1", f"rm -rf {pod.dir}", tb=tb), capture_output=True, timeout=60)


def test_a_multi_node_restart_checks_each_nodes_copy_of_files_never_deployed(tmp_path):
    """A fix copied by hand to one node but not the other: the restart refuses, naming the
    node whose copy differs, and stops nothing (ground truth: the file in each container, and
    the first attempt's pid still running on the node left behind)."""
    import testbed
    from conftest import CLI
    from helpers_container import IMAGE, OPTS
    tb = testbed.require("podman")
    (tmp_path / "work").mkdir()
    c = CLI(tmp_path / "home", tmp_path / "work")
    c.env = testbed.env(tb, c.env)
    box = f"rwtest-{uuid.uuid4().hex[:8]}"
    p = subprocess.run(["podman", "run", "-d", "--name", box, *OPTS, "--init", IMAGE, "sleep", "infinity"],
                       env=c.env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    name = "mc" + uuid.uuid4().hex[:6]
    dest = f"/tmp/{name}"
    (c.cwd / "job.py").write_text(JOB.format(v="v1"))
    (c.cwd / "runward.toml").write_text(
        f'[runs.{name}]\nnodes = ["podman:{tb["podman"]}", "podman:{box}"]\ncommand = ["python3", "{dest}/job.py"]\n'
        f'files = ["job.py:{dest}/job.py"]\nsettle = 0.3\non_node_failure = "continue"\n')

    def put(container: str) -> None:
        r = subprocess.run(["podman", "exec", "-i", container, "sh", "-c", f"mkdir -p {dest} && cat > {dest}/job.py"],
                           input=(c.cwd / "job.py").read_bytes(), env=c.env, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr

    def sha_in(container: str) -> str:
        r = subprocess.run(["podman", "exec", "-i", container, "sha256sum", f"{dest}/job.py"], env=c.env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()[0]
    try:
        put(tb["podman"])
        put(box)
        rc, doc = c.json("start", name)
        assert rc == 0, doc
        first = [n["result"]["pid"] for n in doc["result"]["nodes"]]
        v1 = sha((c.cwd / "job.py").read_bytes())
        (c.cwd / "job.py").write_text(JOB.format(v="v2"))
        put(tb["podman"])  # the fix reached node 0 only
        rc, doc = c.json("restart", name)
        assert rc == 2 and f"podman:{box}" in doc["error"]["message"] and "never deployed" in doc["error"]["message"], doc
        assert sha_in(box) == v1
        rc, st = c.json("status", name)
        assert [n["run"]["pid"] for n in st["result"]["nodes"]] == first, st
        assert all(n["run"]["state"] == "running" for n in st["result"]["nodes"]), st
        for container, pid in zip((tb["podman"], box), first):  # the first attempt's jobs, untouched
            r = subprocess.run(["podman", "exec", "-i", container, "cat", f"/proc/{pid}/cmdline"], env=c.env,
                               capture_output=True, timeout=60)
            assert r.returncode == 0 and f"{dest}/job.py".encode() in r.stdout, (container, pid, r)
    finally:
        c.run("stop", name, "--grace", "2")
        subprocess.run(["podman", "exec", "-i", tb["podman"], "rm", "-rf", dest], env=c.env, capture_output=True)
        subprocess.run(["podman", "rm", "-f", "-t", "0", box], env=c.env, capture_output=True, timeout=120)


def test_a_file_without_a_sha256_at_either_attempt_is_not_known_never_the_same(cli, tmp_path):
    """A run's file that the target cannot hash at the last attempt nor at this one (a
    directory where the file should be; missing) was said 'code: no file changed since
    attempt 1 (same sha256: ...)' (no sha256 existed to be the same). Now it is 'not known'
    (code.unknown), in the text and the JSON. Ground truth: the path is a directory."""
    name = f"rcu{uuid.uuid4().hex[:6]}"
    dest = tmp_path / "deployed"
    (cli.cwd / "cfg.yaml").write_text("lr: 1\n")
    (dest / "cfg.yaml").mkdir(parents=True)
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["sleep", "300"]\nfiles = ["cfg.yaml:{dest}/cfg.yaml"]\nsettle = 0.3\n')
    rc, doc = cli.json("start", name)
    try:
        assert rc == 0, doc
        assert (dest / "cfg.yaml").is_dir()
        rc, doc = cli.json("restart", name, "--no-deploy")
        assert rc == 0, doc
        code = doc["result"]["code"]
        assert code["unknown"] == [f"{dest}/cfg.yaml"] and not code["unchanged"] and not code["changed"], code
        p = cli.run("restart", name, "--no-deploy")
        assert p.returncode == 0, p.stderr
        assert "same sha256" not in p.stdout and f"code: not known (no sha256 at either attempt" in p.stdout, p.stdout
    finally:
        cli.run("stop", name)


def test_restart_names_every_option_runward_toml_changed(cli):
    """settle, grace and [health] stall_after edited in runward.toml are changes as much as the
    command is: restart names each (JSON and text), from the value the last attempt ran with to
    the one the new attempt runs with (ground truth: the new attempt's record on disk), and
    says unchanged when nothing was edited, a notify URL's password neither shown nor a change."""
    import json as jsonlib
    name = f"rco{uuid.uuid4().hex[:6]}"
    toml = ('[runs.{n}]\ncommand = ["sleep", "300"]\nsettle = {settle}\ngrace = {grace}\n'
            'notify = ["https://u:S3CRET@hook.example/x"]\n'
            '[runs.{n}.health]\nstall_after = "{stall}"\nactions = {{ nan = "stop" }}\n')
    (cli.cwd / "runward.toml").write_text(toml.format(n=name, settle=0.3, grace=5, stall="5m"))
    assert cli.json("start", name)[0] == 0
    rc, doc = cli.json("restart", name)
    assert rc == 0 and doc["result"]["changed"] == {}, doc
    (cli.cwd / "runward.toml").write_text(toml.format(n=name, settle=0.4, grace='"7s"', stall="6m"))
    p = cli.run("restart", name)
    assert p.returncode == 0, p.stderr
    record = jsonlib.loads((cli.home / "runs" / name / "attempts" / "3.json").read_text())
    assert (record["settle"], record["grace"], record["stall"]["after"]) == (0.4, 7.0, 360.0), record
    assert "changed since attempt 2:" in p.stdout and "  settle: 0.3 -> 0.4" in p.stdout, p.stdout
    assert "  grace: 5 -> 7.0" in p.stdout and "stall.after: 300.0 -> 360.0" in p.stdout, p.stdout
    assert "S3CRET" not in p.stdout, p.stdout
    (cli.cwd / "runward.toml").write_text(toml.format(n=name, settle=0.4, grace='"7s"', stall="4m"))
    rc, doc = cli.json("restart", name)
    assert rc == 0, doc
    assert doc["result"]["changed"] == {"options": {
        "stall.after": {"from": 360.0, "to": 240.0},
        "supervise.health.rules.stall_after": {"from": 360.0, "to": 240.0}}}, doc["result"]["changed"]
    cli.json("stop", name, "--grace", "2")


def test_a_stop_signal_said_another_way_is_no_change(cli):
    """TERM, SIGTERM and 15 are one signal: a runward.toml that says it another way restarts
    "unchanged"; another signal is a change (ground truth: each attempt's record on disk)."""
    import json as jsonlib
    name = f"rcs{uuid.uuid4().hex[:6]}"
    toml = '[runs.{n}]\ncommand = ["sleep", "300"]\nsettle = 0.3\nstop_signal = "{sig}"\n'
    (cli.cwd / "runward.toml").write_text(toml.format(n=name, sig="TERM"))
    assert cli.json("start", name)[0] == 0
    try:
        for n, sig in ((2, "SIGTERM"), (3, "15"), (4, "term")):
            (cli.cwd / "runward.toml").write_text(toml.format(n=name, sig=sig))
            rc, doc = cli.json("restart", name)
            assert rc == 0 and doc["result"]["changed"] == {}, (sig, doc)
            record = jsonlib.loads((cli.home / "runs" / name / "attempts" / f"{n}.json").read_text())
            assert record["stop_signal"] == "SIGTERM", record
        (cli.cwd / "runward.toml").write_text(toml.format(n=name, sig="INT"))
        rc, doc = cli.json("restart", name)
        assert rc == 0 and doc["result"]["changed"] == {
            "options": {"stop_signal": {"from": "term", "to": "INT"}}}, doc["result"]["changed"]
    finally:
        cli.json("stop", name, "--grace", "2")
