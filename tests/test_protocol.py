"""The agent protocol: versions, the bootstrap's imports, the agent sent only while the far side may lack it."""

from runward.transport import agentcall as transport
from runward.agent.core import boot, secrets, store, wire
from runward.agent import main as agent_main
from runward.agent.proc import terminate


def test_request_of_another_version_is_refused(cli):
    import io
    import json
    out = io.BytesIO()
    rc = agent_main.serve(io.BytesIO(json.dumps({"v": 999, "op": "ping"}).encode() + b"\n"), out)
    reply = json.loads(out.getvalue())
    assert rc == 2 and reply["ok"] is False and "protocol version" in reply["error"]["message"]


def test_the_cached_sha_is_the_blobs_and_follows_the_files(tmp_path, monkeypatch):
    """transport keeps the blob's sha256 in the local cache, keyed by the files' inode, size
    and mtime: a second process reads no agent source, and a changed file is seen."""
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path))
    monkeypatch.setattr(transport, "_SHA", None)
    first = transport.agent_sha()
    assert (tmp_path / "cache" / "blob-sha").exists(), "the cache file was not written"
    monkeypatch.setattr(transport, "_SHA", None)
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: opened.append(p) or real_open(p, *a, **k))
    assert transport.agent_sha() == first
    assert not [p for p in opened if str(p).endswith(".py")]  # from the cache: no source read
    monkeypatch.undo()
    raw, sha = boot.read_blob(transport._AGENT_DIR)
    assert first == sha == hashlib.sha256(raw).hexdigest()
    # a tree that differs from the recorded one (here: another signature) is hashed again
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path))
    monkeypatch.setattr(transport, "_SHA", None)
    cache = tmp_path / "cache" / "blob-sha"
    cache.write_text("0" * 64 + "\n" + cache.read_text().split("\n", 1)[1] + "x")
    assert transport.agent_sha() == sha


# --- the agent's start-up: what a status call imports, and the shortcuts that avoid re/json

import hashlib
import json as _json_mod
import marshal
import pytest
import math
import os
import re
import time
import signal
import subprocess
import sys

from hypothesis import given, settings, strategies as st

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20)


def _same(a, b):
    # NaN != NaN: compare through json's own text
    return _json_mod.dumps(a, sort_keys=True) == _json_mod.dumps(b, sort_keys=True)


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_agent_json_codec_is_json(value):
    text = wire.json_dumps(value)
    assert text == _json_mod.dumps(value)
    assert wire.json_dumps(value, sort_keys=True) == _json_mod.dumps(value, sort_keys=True)
    assert _same(wire.json_loads(text), value)
    assert _same(wire.json_loads(text.encode()), value)
    assert _same(wire.json_loads("\n " + text + " \r\n"), value)


def test_agent_json_codec_refuses_what_json_refuses():
    for bad in ("", " ", "[1,", '{"a": 1} x', "nul", "{'a': 1}", '"\x01"', "[1] [2]"):
        try:
            wire.json_loads(bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"accepted {bad!r}")
    try:
        wire.json_dumps({"a": object()})
    except TypeError:
        pass
    else:
        raise AssertionError("encoded an object json cannot")
    try:
        loop = []
        loop.append(loop)
        wire.json_dumps(loop)
    except ValueError:
        pass
    else:
        raise AssertionError("encoded a circular list")


def test_agent_json_codec_falls_back_to_json_without_the_accelerator(monkeypatch):
    monkeypatch.setitem(sys.modules, "_json", None)  # import _json now fails
    monkeypatch.setattr(wire, "_JSON", [])
    assert wire.json_loads(wire.json_dumps({"x": [1.5, "é"]})) == {"x": [1.5, "é"]}
    assert wire._JSON[0] is _json_mod.loads


def test_signal_names_are_the_signal_modules():
    for n in range(0, 70):
        try:
            want = signal.Signals(n).name
        except ValueError:
            want = f"SIG{n}"
        assert terminate.signal_name(n) == want


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab9Z._-/ é\n", max_size=70))
def test_valid_name_is_the_documented_pattern(name):
    assert store.valid_name(name) == bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name))


def test_secret_names_any_case():
    assert secrets.is_secret_name("hf_token") and secrets.is_secret_name("AWS_SECRET_ACCESS_KEY")
    assert secrets.is_secret_name("db_Password") and not secrets.is_secret_name("LR")


def test_a_status_call_imports_neither_re_nor_json_nor_enum(tmp_path):
    """The agent's start-up is part of every call; these three were half of it."""
    env = dict(os.environ, RUNWARD_HOME=str(tmp_path))
    packed, sha = transport.agent_source()
    req = _json_mod.dumps({"v": boot.PROTOCOL, "op": "status"}).encode() + b"\n"
    stdin = b"%d %s\n" % (len(packed), sha.encode()) + packed + req
    argv = [sys.executable, "-S", "-X", "importtime", "-c", boot.BOOTSTRAP]
    for _ in range(2):  # the first compiles and caches, the second is the usual call
        p = subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        assert _json_mod.loads(p.stdout)["ok"] is True
    imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.decode().splitlines()
                if line.startswith("import time:")}
    assert "marshal" in imported  # the check can see imports at all
    assert not imported & {"re", "json", "enum", "signal", "zlib"}, sorted(imported)
    assert "runward_agent.ops.status" in imported  # the package's own modules are seen too
    assert "runward_agent.ops.start" not in imported  # a status needs nothing of start/stop
    assert not [m for m in imported if "logmetrics" in m], sorted(imported)  # nor the log parser


def test_a_start_and_a_stop_import_none_of_what_only_slurm_nodes_and_json_indenting_need(tmp_path):
    """A start and a stop are the other calls that must stay cheap: a multi-node stop pays it once per node
    on the same machine (bench/multinode.py). subprocess came in through the Slurm check,
    socket and threading through the peers' link, re and enum through json's indenting; the
    shim's start imported subprocess (with locale)."""
    env = dict(os.environ, RUNWARD_HOME=str(tmp_path))
    packed, sha = transport.agent_source()

    def call(req, *flags, pass_fds=()):
        stdin = b"%d %s\n" % (len(packed), sha.encode()) + packed + _json_mod.dumps(req).encode() + b"\n"
        p = subprocess.run([sys.executable, "-S", *flags, "-c", boot.BOOTSTRAP], input=stdin, capture_output=True,
                           env=env, timeout=60, pass_fds=pass_fds)
        lines = [_json_mod.loads(x) for x in p.stdout.splitlines()]
        assert p.returncode == 0 and lines[-1]["ok"] is True, (p.stdout, p.stderr)
        return lines[-1]["result"], p.stderr.decode()

    def imports(err):
        return {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}

    # the shim is forked without subprocess: it must still get no descriptor of the agent's
    # but its stdin, stdout and stderr (an inherited ssh pipe would hold the call open)
    leak_r, leak_w = os.pipe()
    try:
        res, err = call({"v": boot.PROTOCOL, "op": "start", "name": "imp", "argv": ["sleep", "300"], "settle": 0.1},
                        "-X", "importtime", pass_fds=(leak_w,))
        leaked = os.readlink(f"/proc/self/fd/{leak_w}")
    finally:
        os.close(leak_r)
        os.close(leak_w)
    pid = res["pid"]
    rec = _json_mod.loads((tmp_path / "runs" / "imp" / "attempts" / "1.json").read_text())
    for held in (rec["shim"]["pid"], pid):
        fds = os.listdir(f"/proc/{held}/fd")
        assert fds and leaked not in [os.readlink(f"/proc/{held}/fd/{fd}") for fd in fds], held
    assert "runward_agent.supervise.shim" in imports(err) and not imports(err) & {"subprocess", "locale", "socket", "selectors"}
    res, err = call({"v": boot.PROTOCOL, "op": "stop", "name": "imp"}, "-X", "importtime")
    assert res["verified_dead"] and [f["pid"] for f in res["processes"]] == [pid], res
    assert not os.path.exists(f"/proc/{pid}")  # reaped by its shim: gone, not a zombie
    imported = imports(err)
    assert "runward_agent.ops.stop" in imported  # the check sees the stop's own modules
    start_only = {"runward_agent." + m for m in ("ops.start", "shim", "peers", "logfiles")}
    assert not imported & start_only, sorted(imported & start_only)
    heavy = {"re", "json", "enum", "signal", "zlib", "subprocess", "socket", "threading", "selectors", "locale"}
    assert not imported & heavy, sorted(imported & heavy)


# --- the agent's source travels only while the far side may lack it

from runward.targets import parse_target
from conftest import wait_for


@pytest.fixture
def spy(monkeypatch, tmp_path):
    """Every exchange's stdin header, with the real exchange still made."""
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path / "home"))  # the cli fixture's home
    monkeypatch.setattr(transport, "_SOURCE", None)
    heads = []
    real = transport.run_call

    def exchange(argv, head, *a, **kw):
        heads.append(head.split(b"\n", 1)[0].split()[0])  # the source length sent
        return real(argv, head, *a, **kw)
    monkeypatch.setattr(transport, "run_call", exchange)
    return heads


def test_a_far_side_that_ran_the_agent_gets_its_hash_alone(spy, tmp_path):
    local = parse_target("local")
    transport.call(local, {"op": "status"})
    transport.call(local, {"op": "status"})
    assert spy[0] != b"0" and spy[1] == b"0"
    assert (tmp_path / "home" / "cache" / "far-agents").stat().st_mode & 0o777 == 0o600


def test_a_far_side_that_lost_its_cache_gets_the_source_again(spy, tmp_path):
    local = parse_target("local")
    transport.call(local, {"op": "status"})
    for f in (tmp_path / "home" / "cache").glob("agent-*"):
        f.unlink()  # as a wiped or rebuilt machine behind the same name
    res = transport.call(local, {"op": "status"})
    assert res["runs"] == [] and spy == [spy[0], b"0", spy[0]] and spy[0] != b"0"
    transport.call(local, {"op": "status"})
    assert spy[-1] == b"0"


def test_a_start_sends_the_hash_alone_and_its_shim_runs_on_handed_code(spy, cli, tmp_path):
    """A start to a far side that has the agent sends its hash alone: the agent hands its
    shim the code it runs (the next test: a handed agent needs no cache). With the cache
    wiped while the job runs, the shim still records the job's end, and the next call is
    told AgentMissing and sends the source."""
    local = parse_target("local")
    transport.call(local, {"op": "status"})
    res = transport.call(local, {"op": "start", "name": "s1", "argv": ["sleep", "0.8"], "settle": 0.3})
    assert res["verified"] and spy[-1] == b"0", spy
    sent = len(spy)
    for f in (tmp_path / "home" / "cache").glob("agent-*"):
        f.unlink()
    def run():
        return transport.call(local, {"op": "status", "name": "s1"})["runs"][0]
    wait_for(lambda: run()["state"] == "exited", what="the shim's record of the job's end")
    assert run()["exit"]["code"] == 0, run()
    assert spy[sent] == b"0" and spy[sent + 1] != b"0", spy  # AgentMissing, then the source


def test_a_handed_agent_runs_from_what_it_was_given_and_writes_no_cache(tmp_path):
    """The header "<length> <sha256> m": the marshalled modules an agent hands a child. The
    child runs them with an empty home and writes nothing to its cache."""
    packed, sha = transport.agent_source()
    req = _json_mod.dumps({"v": boot.PROTOCOL, "op": "ping"}).encode() + b"\n"
    compiled = tmp_path / "compiled"  # the modules as the bootstrap compiles and caches them
    subprocess.run([sys.executable, "-S", "-c", boot.BOOTSTRAP], env=dict(os.environ, RUNWARD_HOME=str(compiled)),
                   input=b"%d %s\n" % (len(packed), sha.encode()) + packed + req, capture_output=True, timeout=60)
    (cache,) = (compiled / "cache").glob("agent-*")
    codes = marshal.loads(cache.read_bytes())
    home = tmp_path / "home"
    saved = dict(boot.SHIPPED)
    boot.SHIPPED.update(codes=codes, sha=sha)
    try:
        head = boot.handoff()
    finally:
        boot.SHIPPED.clear()
        boot.SHIPPED.update(saved)
    assert head.split(b"\n", 1)[0].split()[1:] == [sha.encode(), b"m"]
    p = subprocess.run([sys.executable, "-S", "-c", boot.BOOTSTRAP], capture_output=True, timeout=60,
                       env=dict(os.environ, RUNWARD_HOME=str(home)), input=head + req)
    reply = _json_mod.loads(p.stdout)
    assert p.returncode == 0 and reply["ok"], (reply, p.stderr)
    assert not list(home.rglob("agent-*"))


def test_the_bootstrap_says_when_it_could_not_cache_the_agent(tmp_path):
    (tmp_path / "cache").write_text("a file where the cache directory would be")
    env = dict(os.environ, RUNWARD_HOME=str(tmp_path))
    packed, sha = transport.agent_source()
    req = _json_mod.dumps({"v": boot.PROTOCOL, "op": "ping"}).encode() + b"\n"
    p = subprocess.run([sys.executable, "-S", "-c", boot.BOOTSTRAP], env=env, capture_output=True,
                       input=b"%d %s\n" % (len(packed), sha.encode()) + packed + req, timeout=60)
    assert _json_mod.loads(p.stdout)["uncached"] is True
    # and without the source it answers AgentMissing, having run nothing
    p = subprocess.run([sys.executable, "-S", "-c", boot.BOOTSTRAP], env=env, capture_output=True,
                       input=b"0 %s\n" % sha.encode() + req, timeout=60)
    reply = _json_mod.loads(p.stdout)
    assert p.returncode == 3 and reply["error"]["type"] == "AgentMissing" and reply["v"] == boot.PROTOCOL


def test_a_version_compiled_here_prunes_other_versions_older_than_a_week(tmp_path):
    """The far side's code cache: one file per agent version (and each version's resident
    leaves a lock and a log). A fresh compile removes the other versions' week-old files,
    and only those; a cache hit removes nothing."""
    env = dict(os.environ, RUNWARD_HOME=str(tmp_path))
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    packed, sha = transport.agent_source()
    week = time.time() - agent_main.CACHE_KEEP_S - 3600
    old = [cache / "agent-0123456789abcdef0123456789abcdef.cpython-311", cache / "resident-0123456789abcdef.log",
           cache / "agent-fedcba9876543210fedcba9876543210.cpython-311.4242"]
    recent = cache / "agent-00000000000000000000000000000000.cpython-311"
    other = cache / "far-agents"  # not the agent's: never touched
    for f in old + [recent, other]:
        f.write_bytes(b"x")
    for f in old + [other]:
        os.utime(f, (week, week))
    req = _json_mod.dumps({"v": boot.PROTOCOL, "op": "ping"}).encode() + b"\n"

    def run():
        p = subprocess.run([sys.executable, "-S", "-c", boot.BOOTSTRAP], env=env, capture_output=True,
                           input=b"%d %s\n" % (len(packed), sha.encode()) + packed + req, timeout=60)
        assert _json_mod.loads(p.stdout)["ok"], p
    # compiled here now: the week-old files of other versions go, nothing else
    run()
    mine = next(cache.glob(f"agent-{sha[:32]}.*"))
    assert not any(f.exists() for f in old)
    assert recent.exists() and other.exists()
    # a cache hit that still got the source (the CLI did not know): nothing goes
    os.utime(mine, (week, week))
    for f in old:
        f.write_bytes(b"x")
        os.utime(f, (week, week))
    run()
    assert all(f.exists() for f in old) and mine.exists()


def test_threads_calling_at_once_build_the_blob_once(monkeypatch):
    """A multi-node call's threads all ask for the agent's blob at once: it is built once."""
    import threading
    monkeypatch.setattr(transport, "_SOURCE", None)
    built = []
    real = transport._boot.build_blob

    def build(d):
        built.append(d)
        return real(d)
    monkeypatch.setattr(transport._boot, "build_blob", build)
    go = threading.Barrier(8)
    got = []

    def ask():
        go.wait()
        got.append(transport.agent_source())
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and len(got) == 8 and len(set(got)) == 1
