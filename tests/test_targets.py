"""Every verb over real SSH hosts (sshd in network namespaces) and into real containers
(podman, LXC behind a `pct` stand-in), with diagnosed failures and verified pushes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import testbed
from conftest import CLI, alive, marked, wait_for
from runward.targets import parse_target
from runward.errors import BadInput
from helpers_targets import _kill_marked, rcli, tb  # noqa: F401  (rcli, tb: fixtures)

# --------------------------------------------------------------------------- grammar (no testbed)


@pytest.mark.parametrize("text,hops", [
    ("local", []),
    ("ssh://gpu1", ["ssh://gpu1"]),
    ("ssh://root@10.1.2.6:10638/pct:200", ["ssh://root@10.1.2.6:10638", "pct:200"]),
    ("ssh://gpu1/docker:trainer", ["ssh://gpu1", "docker:trainer"]),
    ("podman:trainer", ["podman:trainer"]),
    ("lxc:c1", ["lxc:c1"]),
    ("ssh://u@[::1]:22/podman:a/lxc:b", ["ssh://u@::1:22", "podman:a", "lxc:b"]),
])
def test_target_grammar(text, hops):
    assert [str(h) for h in parse_target(text).hops] == hops


@pytest.mark.parametrize("text", ["", "ftp://x", "ssh://", "ssh://a b", "pct:abc", "kube:x", "ssh://h/ssh://g",
                                  "podman:", "ssh://h:99999", "docker:a;b"])
def test_target_grammar_rejects(text):
    with pytest.raises(BadInput) as e:
        parse_target(text)
    assert e.value.hint


@pytest.mark.parametrize("text,fix", [("ssh:/gpu1", "ssh://gpu1"), ("ssh:root@h/pct:200", "ssh://root@h/pct:200"),
                                      ("ssh:gpu1", "ssh://gpu1")])
def test_an_ssh_target_one_slash_short_gets_a_hint_naming_ssh_scheme(text, fix):
    with pytest.raises(BadInput) as e:
        parse_target(text)
    assert fix in e.value.hint and "container hop" not in e.value.hint


def test_wrap_quotes_only_at_the_ssh_hop():
    t = parse_target("ssh://root@h:2222/pct:200")
    argv = t.wrap(["python3", "-c", "print('a b')"], ["ssh"])
    assert argv[:5] == ["ssh", "-p", "2222", "--", "root@h"]
    # pct exec keeps the caller's environment: env -i gives the container's own (targets/pct.py)
    assert argv[5] == ("pct exec 200 -- env -i container=lxc PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                       "/sbin:/bin python3 -c 'print('\"'\"'a b'\"'\"')'")
    t = parse_target("podman:c/lxc:d")
    assert t.wrap(["x y"]) == ["podman", "exec", "-i", "c", "lxc-attach", "-n", "d", "--clear-env", "--", "x y"]


# --------------------------------------------------------------------------- real hosts

ECHO = "import sys, json; sys.stdout.write(json.dumps(sys.argv[1:]))"
words = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
argvs = st.lists(st.one_of(words, st.sampled_from(["", "'", '"', "$HOME", "`id`", "a;b", "x\ny", "é☃", "\\",
                                                    "$(echo hi)", "*", "~", "-c", "--"])), max_size=6)


def _roundtrip(target: str, tb, args: list[str]) -> list[str]:
    from runward.transport import agentcall as transport
    t = parse_target(target)
    env = testbed.env(tb)
    env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    old = dict(os.environ)
    os.environ.update(env)
    try:
        argv = t.wrap(["python3", "-c", ECHO, *args], transport.ssh_base()) if t.hops else \
            [sys.executable, "-c", ECHO, *args]
    finally:
        os.environ.clear()
        os.environ.update(old)
    p = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("target", ["local", "ssh://rw1", "ssh://rw1/podman:rwpod", "ssh://rw1/pct:200"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=argvs)
def test_argv_survives_every_hop_byte_for_byte(tb, target, args):
    assert _roundtrip(target, tb, args) == args


@pytest.mark.parametrize("on", ["h1", "h1pod", "h1pct", "h1docker", "pod"])
def test_lifecycle_on_remote_targets(rcli, on):
    name = f"tr{on}"
    script = ("import os,sys,time\n"
              "if os.fork()==0:\n os.setsid()\n if os.fork()==0:\n  time.sleep(300)\n os._exit(0)\n"
              "print('step 1 ready', flush=True)\ntime.sleep(300)\n")
    try:
        rc, doc = rcli.json("start", name, "--on", on, "--settle", "0.5", "--ready", "^step 1", "--",
                            "python3", "-c", script)
        assert rc == 0, doc
        res = doc["result"]
        assert res["alive_after_settle"] and res["ready"]
        tree = wait_for(lambda: (lambda m: m if len(m) >= 2 else None)(marked(f"{name}.")),
                        what="the job and its escaped grandchild (host /proc)")
        rc, doc = rcli.json("status", name, "--on", on)
        assert rc == 0 and doc["result"]["runs"][0]["state"] == "running"
        rc, doc = rcli.json("restart", name, "--on", on, "--settle", "0.3")
        assert rc == 0, doc
        assert not [p for p, s in tree.items() if alive(p, s)], "restart left processes of attempt 1"
        rc, doc = rcli.json("logs", name, "--on", on, "-n", "50")
        assert rc == 0 and sum("step 1 ready" == ln for ln in doc["result"]["lines"]) == 2
        tree = marked(f"{name}.")
        rc, doc = rcli.json("stop", name, "--on", on, "--grace", "2")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        assert not [p for p, s in tree.items() if alive(p, s)]
        rc, doc = rcli.json("status", name, "--on", on)
        assert doc["result"]["runs"][0]["state"] == "exited"
    finally:
        _kill_marked(f"{name}.")


def test_remote_exit_code_and_early_exit(rcli):
    rc, doc = rcli.json("start", "rx", "--on", "h1pct", "--settle", "10", "--sh", "echo oops >&2; exit 9")
    assert rc == 1 and doc["result"]["exit"]["code"] == 9
    assert "oops" in doc["result"]["last_lines"]


def test_stop_from_remote_shell_whose_command_line_contains_the_pattern(rcli, tb):
    """ssh host "bash -c '<runward agent> ...'" where the remote shell's argv has the job's words."""
    rc, doc = rcli.json("start", "pat", "--on", "h1", "--settle", "0.3", "--", "sleep", "313")
    assert rc == 0, doc
    base = " ".join(rcli.argv())
    line = f"{base} stop pat --on h1 --grace 3 && echo still-here-sleep-313"
    p = subprocess.run(["bash", "-c", line], cwd=rcli.cwd, env=rcli.env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "still-here-sleep-313" in p.stdout, p.stderr
    assert not marked("pat.")


# --------------------------------------------------------------------------- diagnosed failures

@pytest.mark.parametrize("target,kind,needle,code", [
    ("ssh://rw-down", "Unreachable", "connection refused", 3),
    ("ssh://rw-badhostkey", "Unreachable", "host key", 3),
    ("ssh://rw1/podman:no-such-ctr", "HopFailed", "container not found", 3),
    ("ssh://rw1/pct:999", "HopFailed", "container not found", 3),
    ("ssh://rw1/pct:201", "HopFailed", "not running", 3),
    ("ssh://rw1/podman:rwpod-stopped", "HopFailed", "not running", 3),
    ("ssh://rw1/podman:rwpod-nopy", "HopFailed", "python3 not found", 3),
    ("ssh://no-such-host.invalid", "Unreachable", "could not be resolved", 3),
])
def test_failures_are_diagnosed_with_hop_and_hint(rcli, tb, target, kind, needle, code):
    rc, doc = rcli.json("status", "--on", target)
    assert rc == code, doc
    err = doc["error"]
    assert err["type"] == kind and needle in err["message"] and err.get("hint") and err.get("hop")
    p = rcli.run("status", "--on", target)
    assert "at hop:" in p.stderr and "hint:" in p.stderr


def test_auth_refused_is_diagnosed(tmp_path, tb):
    c = CLI(tmp_path / "fresh-home", tmp_path)  # fresh control sockets: no master to reuse
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    rc, doc = c.json("status", "--on", "ssh://rw-badkey")
    assert rc == 3 and "Permission denied" in doc["error"]["message"]


def test_an_alias_the_host_refuses_fails_beside_an_open_master_of_that_host(tmp_path, tb, monkeypatch):
    """rw-badkey is rw1 (same address, port and user) with a key rw1 does not authorize.
    With rw1's control master open, OpenSSH's %C alone named the same socket for both, and
    rw-badkey's status rode rw1's connection: it worked while that master lived. Each
    destination as written has its own master: the refusal is said, every time."""
    c = CLI(tmp_path / "home", tmp_path)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    rc, doc = c.json("status", "--on", "ssh://rw1")
    assert rc == 0, doc
    from runward.transport import agentcall as transport
    monkeypatch.setenv("RUNWARD_HOME", str(c.home))
    socks = [p for p in os.listdir(transport.control_dir()) if not p.startswith("r-")]
    assert socks, "rw1's master is open"  # the check sees a master at all
    rc, doc = c.json("status", "--on", "ssh://rw-badkey")
    assert rc == 3 and "Permission denied" in doc["error"]["message"], doc
    rc, doc = c.json("status", "--on", "ssh://rw1")
    assert rc == 0, doc


def test_connect_timeout_is_diagnosed(tmp_path, tb):
    c = CLI(tmp_path / "home", tmp_path)
    c.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"], RUNWARD_CONNECT_TIMEOUT="1")
    rc, doc = c.json("status", "--on", "ssh://" + tb["timeout_host"])
    assert rc == 3 and doc["error"]["type"] == "Unreachable"
    assert "timeout" in doc["error"]["message"] or "timed out" in doc["error"]["message"]


def test_agent_killed_by_signal_is_named(rcli):
    # a sleep with a duration no other test uses; its parent is this call's agent
    naptime = "30.%d" % (os.getpid() % 1000)
    p = rcli.popen("exec", "--on", "h1", "--json", "--", "sleep", naptime)

    def remote_agent():
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    cmd = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
                    stat = Path(f"/proc/{d}/stat").read_text()
                except OSError:
                    continue
                if cmd[:2] == [b"sleep", naptime.encode()]:
                    ppid = int(stat.rsplit(")", 1)[1].split()[1])
                    try:
                        parent = Path(f"/proc/{ppid}/cmdline").read_bytes()
                    except OSError:
                        continue
                    if b"import sys,os,marshal" in parent:
                        return ppid
        return None
    pid = wait_for(remote_agent, what="the remote agent")
    os.kill(pid, signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    doc = json.loads(out)
    assert p.returncode == 3
    assert doc["error"]["type"] == "HopFailed" and "killed by SIGKILL" in doc["error"]["message"]


def test_reply_that_is_not_json_shows_its_first_bytes(rcli, tmp_path):
    from runward.transport import agentcall as transport
    from runward.transport.agentcall import RawResult, diagnose
    raw = RawResult(["ssh"], 0, [b"Welcome to gpu1! motd here\n"], "", 0.1)
    e = diagnose(parse_target("ssh://gpu1"), raw)
    assert e.kind == "AgentError" and "Welcome to gpu1" in e.message and ".bashrc" in e.hint


def test_exec_returns_code_signal_output_and_self_kill_hint(rcli):
    rc, doc = rcli.json("exec", "--on", "h1pct", "--", "sh", "-c", "echo out; echo err >&2; exit 4")
    assert rc == 4 and doc["result"]["exit"] == 4 and "error" not in doc  # passed through, as ssh does
    r = doc["result"]
    assert (r["code"], r["stdout"], r["stderr"]) == (4, "out\n", "err\n") and r["duration_s"] >= 0
    tag = uuid.uuid4().hex[:10]
    # inside the LXC container (own pid namespace): the test hosts share this machine's pids, and
    # there `pkill -f` would also find this very CLI, whose argv carries the pattern
    rc, doc = rcli.json("exec", "--on", "h1pct", "--force", "--sh", f"pkill -9 -f {tag}; echo after-{tag}")
    r = doc["result"]
    assert rc == 128 + 9 and r["signal"] == "SIGKILL" and f"after-{tag}" not in r["stdout"]
    assert "killed its own shell" in r["diagnosis"]


def test_doctor_reports_each_hop(rcli):
    rc, doc = rcli.json("doctor", "--on", "ssh://rw1/pct:200")
    assert rc == 0
    hops = doc["result"]["hops"]
    assert [h["hop"] for h in hops] == ["ssh://rw1", "pct:200"] and all(h["reached"] for h in hops)
    c = hops[1]["checks"]
    assert c["python_ok"] and c["state_dir"]["writable"] and c["boot_id"] and "cgroups" in c
    assert c["nvidia_smi"]["path"] is None
    rc, doc = rcli.json("doctor", "--on", "ssh://rw1/pct:201")
    assert rc == 3 and doc["result"]["hops"][0]["reached"] and not doc["result"]["hops"][1]["reached"]


# --------------------------------------------------------------------------- files land where the job runs

def test_push_lands_in_the_container_not_the_host(rcli, tmp_path):
    tag = uuid.uuid4().hex[:8]
    src = tmp_path / "train.py"
    src.write_text("print('v2')\n")
    src.chmod(0o750)
    remote = f"/root/rw-push-{tag}.py"
    rc, doc = rcli.json("push", "--on", "h1pct", f"{src}:{remote}")
    assert rc == 0, doc
    f = doc["result"]["files"][0]
    assert f["sha256"] and doc["result"]["verified"] == ["sha256_on_target"]
    assert not Path(remote).exists(), "the push landed on the host's filesystem"
    rc, doc = rcli.json("exec", "--on", "h1pct", "--", "sh", "-c", f"stat -c %a {remote}; cat {remote}")
    assert doc["result"]["stdout"] == "750\nprint('v2')\n"
    # the same push to the host hop lands on the host
    rc, doc = rcli.json("push", "--on", "h1", f"{src}:{remote}")
    try:
        assert rc == 0 and Path(remote).read_text() == "print('v2')\n"
    finally:
        Path(remote).unlink(missing_ok=True)


def test_push_directory_recursive_and_big_file_streamed(rcli, tmp_path):
    d = tmp_path / "pkg"
    (d / "sub").mkdir(parents=True)
    (d / "a.py").write_text("A")
    (d / "sub" / "b.sh").write_text("B")
    (d / "sub" / "b.sh").chmod(0o755)
    big = d / "weights.bin"
    with open(big, "wb") as f:  # 300 MiB, written in blocks of varied content
        for i in range(300):
            f.write(bytes([i % 251]) * (1 << 20))
    dest = f"{rcli.remote_home}-pushdir"
    p = subprocess.Popen(rcli.argv("push", "--on", "h1", "--json", f"{d}:{dest}"), cwd=rcli.cwd, env=rcli.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0
    while p.poll() is None:
        try:
            for ln in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                if ln.startswith("VmHWM:"):
                    peak = max(peak, int(ln.split()[1]))
        except OSError:
            pass
        time.sleep(0.05)
    out, err = p.communicate()
    assert p.returncode == 0, err
    assert peak < 120 * 1024, f"the CLI held {peak} KiB: the file must be streamed, not loaded"
    import hashlib
    assert hashlib.sha256(Path(dest, "weights.bin").read_bytes()).hexdigest() == hashlib.sha256(big.read_bytes()).hexdigest()
    assert Path(dest, "sub", "b.sh").stat().st_mode & 0o777 == 0o755 and Path(dest, "a.py").read_text() == "A"
    assert not list(Path(dest).rglob(".*runward-tmp*")), "temp files left behind"


def test_deploy_then_code_drift_in_status(rcli, tmp_path):
    work = rcli.cwd
    (work / "job.py").write_text("import time\nprint('job v1', flush=True)\ntime.sleep(300)\n")
    remote = f"{rcli.remote_home}-drift/job.py"
    cfg = (work / "runward.toml").read_text() + f'''
[runs.dr]
on = "h1"
command = ["python3", "{remote}"]
files = ["job.py:{remote}"]
settle = 0.3
'''
    (work / "runward.toml").write_text(cfg)
    try:
        rc, doc = rcli.json("deploy", "dr")
        assert rc == 0, doc
        rc, doc = rcli.json("start", "dr")
        assert rc == 0, doc
        rc, doc = rcli.json("status", "dr")
        r = doc["result"]["runs"][0]
        assert "drift" not in r and "local_drift" not in r
        (work / "job.py").write_text("import time\nprint('job v2', flush=True)\ntime.sleep(300)\n")
        rc, doc = rcli.json("status", "dr")
        r = doc["result"]["runs"][0]
        assert r["local_drift"][0]["remote"] == remote and "drift" not in r
        rc, doc = rcli.json("deploy", "dr")
        rc, doc = rcli.json("status", "dr")
        r = doc["result"]["runs"][0]
        assert r["drift"][0]["path"] == remote, "the code on disk is not the code running: must be said"
        assert "local_drift" not in r
        rc, doc = rcli.json("restart", "dr", "--deploy")
        assert rc == 0 and [s["step"] for s in doc["result"]["steps"]] == ["stop", "deploy", "start"]
        rc, doc = rcli.json("status", "dr")
        assert "drift" not in doc["result"]["runs"][0]
    finally:
        _kill_marked("dr.")


# --------------------------------------------------------------------------- many hosts

def test_status_all_in_parallel_one_unreachable_never_hides_the_others(rcli):
    work = rcli.cwd
    (work / "runward.toml").write_text((work / "runward.toml").read_text() + '\n[targets.down]\non = "ssh://rw-down"\n')
    rc, doc = rcli.json("status", "--all")
    assert rc == 3
    by = {t["target"].split(" ")[0]: t for t in doc["targets"]}
    assert not by["down"]["ok"] and "refused" in by["down"]["error"]["message"]
    assert all(by[f"n{i}"]["ok"] for i in range(1, 9))
    p = rcli.run("status", "--all")
    assert "== down" in p.stdout and "unreachable" in p.stdout


def test_status_of_one_run_on_all_targets_says_where_it_is(rcli):
    """`status NAME --all`: a target without NAME answers "not here" (no failure, unless no
    target has it: 4, as on one target); a target that cannot be reached still fails (3)."""
    name = "where" + uuid.uuid4().hex[:6]
    rc, doc = rcli.json("start", name, "--on", "n2", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0, doc
    try:
        rc, doc = rcli.json("status", name, "--all")
        by = {t["target"].split(" ")[0]: t for t in doc["targets"]}
        assert rc == 0 and doc["ok"], doc
        assert by["n2"]["ok"] and by["n2"]["result"]["runs"][0]["state"] == "running"
        assert not by["n1"]["ok"] and by["n1"]["error"]["type"] == "RunNotFound"
        p = rcli.run("status", name, "--all")
        assert p.returncode == 0 and "== n1 (ssh://rw1)\n  not here: " in p.stdout and "unreachable" not in p.stdout
        rc, doc = rcli.json("status", "nosuch" + name, "--all")
        assert rc == 4 and not doc["ok"]
        work = rcli.cwd
        (work / "runward.toml").write_text((work / "runward.toml").read_text() + '\n[targets.down]\non = "ssh://rw-down"\n')
        p = rcli.run("status", name, "--all")
        assert p.returncode == 3 and "== down (ssh://rw-down)\n  unreachable: " in p.stdout
    finally:
        rc, doc = rcli.json("stop", name, "--on", "n2")
        assert rc == 0, doc


def test_no_process_carries_the_request_in_its_command_line(rcli):
    """The run name travels on stdin: neither the ssh client, nor the remote shell, nor the
    agent has it in argv (a `pkill -f NAME` on the host could never hit them)."""
    name = "req" + uuid.uuid4().hex[:8]
    rc, doc = rcli.json("start", name, "--on", "h1", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0
    try:
        p = rcli.popen("logs", name, "--on", "h1", "-f", "--for", "3")
        seen = []

        def agent_running():
            found = False
            for d in os.listdir("/proc"):
                if not d.isdigit() or int(d) in (p.pid, os.getpid()):
                    continue
                try:
                    cmd = Path(f"/proc/{d}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"import sys,os,marshal" in cmd and not cmd.endswith(b"runward-resident\0"):
                    found = True  # this call's agent (a resident serves other calls)
                if name.encode() in cmd and b"sleep" not in cmd:
                    seen.append(cmd)
            return found
        wait_for(agent_running, what="the remote agent")
        p.communicate(timeout=30)
        assert not seen, seen
    finally:
        _kill_marked(f"{name}.")


def test_every_hop_module_is_registered_and_round_trips():
    """A hop is one small module of runward/targets (docs/architecture.md, "Add a hop"):
    every such module is in the registry, parses as KIND:NAME and wraps an argv with the
    argv untouched at its end (no quoting: only ssh quotes)."""
    import pkgutil

    import runward.targets as targets
    # an engine's scheme (slurm://, ray://: targets.ENGINES) names a host, not a hop that wraps;
    # model.py holds Hop and Target themselves; sshconf.py the ssh hop's client options,
    # sshresolve.py what ssh resolves it to, spawn.py the local child a hop chain's command runs in
    mods = {m.name for m in pkgutil.iter_modules(targets.__path__)} - {"ssh", "model", "sshconf", "sshresolve",
                                                                       "spawn"} - set(targets.ENGINES)
    assert mods == set(targets.CONTAINER_HOPS), (mods, set(targets.CONTAINER_HOPS))
    inner = ["python3", "-c", "print('a b')", "$HOME"]
    for kind, mod in targets.CONTAINER_HOPS.items():
        name = "200" if kind == "pct" else "c1"
        t = parse_target(f"ssh://h/{kind}:{name}")
        assert str(t) == f"ssh://h/{kind}:{name}"
        wrapped = t.hops[1].wrap(inner)
        assert wrapped[-len(inner):] == inner and name in wrapped[:-len(inner)], wrapped
        assert mod.check(name) is None
        # how its failures read: transport/diagnosis.py asks the hop, and holds no hop's words itself
        for attr in ("TOOL", "SAYS", "LINE", "ABSENT", "STOPPED", "CHECK"):
            assert isinstance(getattr(mod, attr, None), str) and getattr(mod, attr), (kind, attr)
        assert name in mod.CHECK.format(name=name), kind


def test_a_slurm_target_is_built_by_its_own_module():
    """targets/slurm.py builds its Target from targets/model.py, below both it and the
    package: no class handed in by the package that imports it (issue 27: no import cycle)."""
    from runward.targets import Hop, Target, slurm
    t = slurm.parse("slurm://alice@login1:2222/debug", label="cluster", options={"time": "1:00:00"})
    assert isinstance(t, Target) and t.hops == (Hop("ssh", "login1", "alice", 2222),)
    assert str(t) == "slurm://alice@login1:2222/debug" and slurm.render(t) == str(t)
    assert t.engine_spec == {"partition": "debug", "options": {"time": "1:00:00"}} and t.label == "cluster"
    assert str(slurm.parse("slurm://local/gpu")) == "slurm://local/gpu"
    assert parse_target("slurm://login1/debug") == slurm.parse("slurm://login1/debug")
