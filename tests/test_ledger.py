"""Every attempt an experiment (issue 30): `history` says, per attempt, how it ended, how far
and how fast it got and what changed against the attempt before. Ground truth: the example
job's own log lines (the tok/s it really printed), the sha256 of train.py as it was deployed,
the env each restart was given; real starts and restarts on the local target and over ssh
into a container (testbed)."""

from __future__ import annotations

import hashlib
import statistics
import uuid
from pathlib import Path

import pytest

from conftest import CLI, EXAMPLE, env_flags, exited_attempt
from podjob import pod  # noqa: F401 (the fixture)
from helpers_ledger import FAST, _attempt_lines, _printed_tok_s, _steps_past, _watch

SECRET = "hf_" + uuid.uuid4().hex  # a secret's value: never in any output


def sha8(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:8]


def _check_history(cli: CLI, name: str, old: bytes, new: bytes, path_end: str) -> None:
    """Two attempts: 14500 tok/s then 9000 with a changed train.py and a secret added."""
    p = cli.run("history", name, "--json")
    assert p.returncode == 0, p.stderr
    assert SECRET not in p.stdout + p.stderr, "a secret's value left the target"
    import json
    a1, a2 = json.loads(p.stdout)["result"]["attempts"]
    for row, n in ((a1, 1), (a2, 2)):
        assert row["attempt"] == n and row["state"] == "exited" and row["exit"]["code"] == 0, row
        assert row["steps"] == 40, row
        printed = _printed_tok_s(_attempt_lines(cli, name, n))
        assert len(printed) == 40
        tp = row["throughput"]
        assert tp["metric"] == "tok_s" and tp["points"] == 40 - tp["warmup_points"], tp
        assert tp["median"] == pytest.approx(statistics.median(printed[tp["warmup_points"]:])), tp
        assert row["loss"]["metric"] == "loss" and row["loss"]["last"] is not None
    assert a1["changed"] is None
    ch = a2["changed"]
    (path,) = ch["files"]
    assert path.endswith(path_end) and ch["files"][path] == [sha8(old), sha8(new)], ch
    assert ch["env"]["changed"] == {"TRAIN_TOKS": ["14500", "9000"]}, ch
    assert ch["env"]["added"] == {"HF_TOKEN": "[secret]"}, ch
    assert "command" not in ch and "cwd" not in ch, ch
    text = cli.run("history", name)
    assert text.returncode == 0 and SECRET not in text.stdout
    lines = text.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("#1 ") and lines[1].startswith("#2 "), lines
    assert f"{sha8(old)}->{sha8(new)}" in lines[1] and "TRAIN_TOKS 14500->9000" in lines[1], lines[1]
    assert "+HF_TOKEN=[secret]" in lines[1] and "step 40" in lines[1], lines[1]


def _check_compare(cli: CLI, name: str, old: bytes, new: bytes) -> None:
    """compare (the last two by default) says the same change, and the throughput change the
    job really printed at the steps both attempts reached."""
    p = cli.run("compare", name, "--json")
    assert p.returncode == 0, p.stderr
    assert SECRET not in p.stdout + p.stderr
    import json
    res = json.loads(p.stdout)["result"]
    assert (res["a"], res["b"]) == (1, 2) and res["metric"] == "tok_s", res
    assert [v for v in res["changed"]["files"].values()] == [[sha8(old), sha8(new)]], res["changed"]
    lo, hi = res["steps"]
    assert hi == 40 and lo <= 10, res["steps"]
    printed = [dict(enumerate(_printed_tok_s(_attempt_lines(cli, name, n)), start=1)) for n in (1, 2)]
    want = [statistics.median(t[s] for s in range(lo, hi + 1)) for t in printed]
    assert res["throughput"] == pytest.approx(want), (res["throughput"], want)
    assert want[1] / want[0] == pytest.approx(9000 / 14500, rel=0.05)  # the change the job really had
    pct = (want[1] - want[0]) / want[0] * 100
    assert res["verdict"].startswith(f"tok_s {want[0] / 1000:.2f}".rstrip("0").rstrip(".")), res["verdict"]
    assert f"({pct:+.1f}%) over steps {lo}-40; loss at step 40" in res["verdict"], res["verdict"]
    (diff,) = res["diffs"].values()  # train.py's text as each attempt ran it, kept on the target
    assert diff["truncated"] is False and "\n+# attempt 2: a changed train.py\n" in diff["diff"], diff
    assert "(attempt 1)" in diff["diff"].splitlines()[0] and "(attempt 2)" in diff["diff"].splitlines()[1]
    assert sum(ln.startswith(("+", "-")) for ln in diff["diff"].splitlines()[2:]) == 2, diff["diff"]
    text = cli.run("compare", name, "1", "2")
    assert text.returncode == 0 and res["verdict"] in text.stdout and "TRAIN_TOKS 14500->9000" in text.stdout


def test_history_says_what_changed_and_what_it_did_locally(cli):
    name = f"lh{uuid.uuid4().hex[:6]}"
    train = cli.cwd / "train.py"
    old = EXAMPLE.read_bytes()
    train.write_bytes(old)
    rc, doc = cli.json("start", name, "--cwd", str(cli.cwd), "--settle", "0.3", *env_flags(*FAST, "TRAIN_TOKS=14500"),
                       "--", "python3", "train.py")
    assert rc == 0, doc
    exited_attempt(cli, name, 1)
    new = old + b"\n# attempt 2: a changed train.py\n"
    train.write_bytes(new)
    rc, doc = cli.json("restart", name, *env_flags("TRAIN_TOKS=9000", f"HF_TOKEN={SECRET}"))
    assert rc == 0, doc
    exited_attempt(cli, name, 2)
    _check_history(cli, name, old, new, "/train.py")
    _check_compare(cli, name, old, new)


def test_compare_says_too_few_points_rather_than_a_number(cli):
    name = f"lf{uuid.uuid4().hex[:6]}"
    (cli.cwd / "train.py").write_bytes(EXAMPLE.read_bytes())
    short = ["TRAIN_STEP_SECONDS=0.5", "TRAIN_STEPS=3", "TRAIN_WORKERS=0", "TRAIN_ESCAPEE=0"]
    rc, doc = cli.json("start", name, "--cwd", str(cli.cwd), "--settle", "0.3", *env_flags(*short), "--", "python3", "train.py")
    assert rc == 0, doc
    exited_attempt(cli, name, 1)
    rc, doc = cli.json("restart", name)
    assert rc == 0, doc
    exited_attempt(cli, name, 2)
    rc, doc = cli.json("compare", name)
    assert rc == 0, doc
    res = doc["result"]
    assert "throughput" not in res and "tok_s: too few points at common steps" in res["verdict"], res
    rc, doc = cli.json("compare", name, "1")
    assert rc == 2 and "two needed" in doc["error"]["message"], doc
    rc, doc = cli.json("compare", name, "1", "9")
    assert rc == 4 and "no attempt 9" in doc["error"]["message"], doc


def test_history_of_an_unknown_run_is_exit_4(cli):
    rc, doc = cli.json("history", f"nx{uuid.uuid4().hex[:6]}")
    assert rc == 4 and doc["error"]["type"] == "RunNotFound", doc


# --------------------------------------------------------------------------- a container behind ssh

def test_history_over_ssh_into_a_container_after_a_deploy(pod):
    name = f"lp{uuid.uuid4().hex[:6]}"
    dest = f"{pod.dir}/code"
    old = EXAMPLE.read_bytes()
    (pod.cwd / "train.py").write_bytes(old)
    env = ", ".join(f'{k} = "{v}"' for k, v in (kv.split("=") for kv in FAST + ["TRAIN_TOKS=14500"]))
    (pod.cwd / "runward.toml").write_text(
        pod.toml_head + f'[runs.{name}]\non = "h1pod"\ncommand = ["python3", "{dest}/train.py"]\ncwd = "{dest}"\n'
        f'files = ["train.py:{dest}/train.py"]\nsettle = 0.3\nenv = {{ {env} }}\n')
    try:
        rc, doc = pod.json("deploy", name)
        assert rc == 0, doc
        rc, doc = pod.json("start", name)
        assert rc == 0, doc
        assert not Path(dest).exists(), "the files must land in the container, not on this host"
        exited_attempt(pod, name, 1)
        new = old + b"\n# attempt 2: a changed train.py\n"
        (pod.cwd / "train.py").write_bytes(new)
        rc, doc = pod.json("restart", name, "--deploy", *env_flags("TRAIN_TOKS=9000", f"HF_TOKEN={SECRET}"))
        assert rc == 0, doc
        exited_attempt(pod, name, 2)
        _check_history(pod, name, old, new, f"{dest}/train.py")
        _check_compare(pod, name, old, new)
    finally:
        pod.json("stop", name, "--grace", "2")


def test_compare_never_keeps_a_secret_and_rm_removes_what_it_kept(cli):
    """A deployed file that holds a secret env value is not kept (compare says why); rm
    removes the kept text with the run's records."""
    name = f"ls{uuid.uuid4().hex[:6]}"
    dest = cli.cwd / "deployed"
    (cli.cwd / "train.py").write_bytes(EXAMPLE.read_bytes())
    (cli.cwd / "conf.yaml").write_text("lr: 1\n")
    env = ", ".join(f'{k} = "{v}"' for k, v in (kv.split("=") for kv in FAST))
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "{dest}/train.py"]\ncwd = "{dest}"\nsettle = 0.3\n'
        f'files = ["train.py:{dest}/train.py", "conf.yaml:{dest}/conf.yaml"]\nenv = {{ {env} }}\n')
    rc, doc = cli.json("deploy", name)
    assert rc == 0, doc
    rc, doc = cli.json("start", name)
    assert rc == 0, doc
    exited_attempt(cli, name, 1)
    (cli.cwd / "conf.yaml").write_text(f"lr: 2\ntoken: {SECRET}\n")
    (cli.cwd / "train.py").write_bytes(EXAMPLE.read_bytes() + b"# v2\n")
    rc, doc = cli.json("restart", name, "--deploy", *env_flags(f"HF_TOKEN={SECRET}"))
    assert rc == 0, doc
    exited_attempt(cli, name, 2)
    p = cli.run("compare", name, "--json")
    assert p.returncode == 0 and SECRET not in p.stdout + p.stderr, p.stderr
    import json
    diffs = json.loads(p.stdout)["result"]["diffs"]
    assert diffs[f"{dest}/conf.yaml"] == {"why": "attempt 2: holds the value of a secret env entry"}, diffs
    assert "+# v2" in diffs[f"{dest}/train.py"]["diff"], diffs
    kept = cli.home / "runs" / name / "snapshots"
    assert len(list(kept.iterdir())) == 3  # conf.yaml of attempt 1, train.py of both
    assert not any(SECRET.encode() in f.read_bytes() for f in kept.iterdir())
    rc, doc = cli.json("rm", name)
    assert rc == 0, doc
    assert not kept.exists() and not (cli.home / "runs" / name).exists()
    left = [f for f in cli.home.rglob("*") if f.is_file() and f.stat().st_size == len(EXAMPLE.read_bytes()) + 5]
    assert not left, f"rm left attempt 2's train.py behind: {left}"


# --------------------------------------------------------------------------- baselines in health rules

def test_a_baseline_rule_fires_on_a_slower_attempt_and_not_on_an_equal_one(cli):
    name = f"lb{uuid.uuid4().hex[:6]}"
    (cli.cwd / "train.py").write_bytes(EXAMPLE.read_bytes())
    env = ", ".join(f'{k} = "{v}"' for k, v in (kv.split("=") for kv in FAST + ["TRAIN_TOKS=14500"]))
    toml = (f'[runs.{name}]\ncommand = ["python3", "train.py"]\ncwd = "{cli.cwd}"\nsettle = 0.3\n'
            f'env = {{ {env} }}\n\n[runs.{name}.health]\ntok_s = {{ min_ratio = 0.95, baseline = "{{b}}" }}\n')
    (cli.cwd / "runward.toml").write_text(toml.replace("{b}", "best"))
    rc, doc = cli.json("start", name)
    assert rc == 0, doc
    exited_attempt(cli, name, 1)  # the baseline: 40 steps at 14500 tok/s
    try:
        # slower: 9000 tok/s, running on (TRAIN_STEPS=0) while the watch judges it
        rc, doc = cli.json("restart", name, *env_flags("TRAIN_TOKS=9000", "TRAIN_STEPS=0"))
        assert rc == 0, doc
        _steps_past(cli, name, 2, 12)
        rc, doc = _watch(cli, name, "30")
        assert rc == 1 and doc["result"]["alert"]["kind"] == "below_baseline", doc
        al = doc["result"]["alert"]
        assert al["baseline"] == 1 and al["metric"] == "tok_s" and al["ratio"] == pytest.approx(9000 / 14500, rel=0.05), al
        assert "of attempt 1's" in al["detail"], al
        # equal: 14500 again, judged against attempt 1 by number
        (cli.cwd / "runward.toml").write_text(toml.replace("{b}", "attempt:1"))
        rc, doc = cli.json("restart", name, *env_flags("TRAIN_TOKS=14500", "TRAIN_STEPS=0"))
        assert rc == 0, doc
        _steps_past(cli, name, 3, 12)
        rc, doc = _watch(cli, name, "3")
        assert rc == 0 and doc["result"]["healthy"], doc
        seen = doc["result"]["baseline"]["tok_s"]
        assert seen["baseline"] == 1 and seen["ratio"] == pytest.approx(1.0, rel=0.05), seen  # judged, not skipped
    finally:
        cli.json("stop", name, "--grace", "2")


@pytest.mark.parametrize("rule, word", [
    ('tok_s = { min_ratio = "fast" }', "min_ratio"),
    ('tok_s = { min_ratio = 0.9, baseline = "worst" }', "baseline"),
    ('tok_s = { ratio = 0.9 }', "min_ratio and baseline only"),
])
def test_a_bad_baseline_rule_is_exit_2_naming_it(cli, rule, word):
    name = f"lx{uuid.uuid4().hex[:6]}"
    (cli.cwd / "runward.toml").write_text(f'[runs.{name}]\ncommand = ["true"]\n\n[runs.{name}.health]\n{rule}\n')
    rc, doc = cli.json("watch", name, "--for", "1")
    assert rc == 2 and "tok_s" in doc["error"]["message"] and word in doc["error"]["message"], doc
    assert "min_ratio = 0.95" in doc["error"]["hint"] or "attempt:N" in doc["error"]["hint"], doc


# --------------------------------------------------------------------------- the Python API and MCP

def _two_short_attempts(cli: CLI, name: str) -> None:
    (cli.cwd / "train.py").write_bytes(EXAMPLE.read_bytes())
    rc, doc = cli.json("start", name, "--cwd", str(cli.cwd), "--settle", "0.3", *env_flags(*FAST, "TRAIN_TOKS=14500"),
                       "--", "python3", "train.py")
    assert rc == 0, doc
    exited_attempt(cli, name, 1)
    (cli.cwd / "train.py").write_bytes(EXAMPLE.read_bytes() + b"# v2\n")
    rc, doc = cli.json("restart", name, *env_flags("TRAIN_TOKS=13000"))
    assert rc == 0, doc
    exited_attempt(cli, name, 2)


def _untimed(doc: dict) -> dict:
    doc["result"].pop("time", None)  # when the history was read: the one field two calls differ in
    return doc


def test_the_python_api_and_the_mcp_tools_give_the_clis_documents(cli, monkeypatch):
    name = f"la{uuid.uuid4().hex[:6]}"
    _two_short_attempts(cli, name)
    want = {v: _untimed(cli.json(v, name)[1]) for v in ("history", "compare")}
    assert want["compare"]["result"]["diffs"] and want["history"]["result"]["attempts"][1]["changed"]
    monkeypatch.setenv("RUNWARD_HOME", str(cli.home))
    monkeypatch.chdir(cli.cwd)
    import runward
    assert _untimed(runward.history(name).check().to_json()) == want["history"]
    assert runward.compare(name, 1, 2).check().to_json() == want["compare"]
    bad = runward.compare(name, 1, 9)
    assert bad.exit_code == 4 and bad.error["type"] == "RunNotFound"
    pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
    import json
    import sys

    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def main():
        params = StdioServerParameters(command=sys.executable, args=["-m", "runward", "mcp"], env=cli.env,
                                       cwd=str(cli.cwd))
        with open(cli.cwd / "mcp.stderr", "a") as err:
            async with stdio_client(params, errlog=err) as (r, w):
                async with ClientSession(r, w) as s:
                    with anyio.fail_after(60):
                        await s.initialize()
                        tools = {t.name: t for t in (await s.list_tools()).tools}
                        assert tools["history"].annotations.read_only_hint and tools["compare"].annotations.read_only_hint
                        for verb, args in (("history", {"name": name}), ("compare", {"name": name, "a": 1, "b": 2})):
                            res = await s.call_tool(verb, args)
                            assert not res.is_error and _untimed(json.loads(res.content[0].text)) == want[verb]
    anyio.run(main)
