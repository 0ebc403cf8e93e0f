"""Review rvC: the three doors (CLI, `import runward`, the MCP tools) give one answer to one
bad value, and a refused value leaves nothing behind (ground truth: /proc marks and the run's
records under RUNWARD_HOME, never runward's own answer).

Each case here got through before the fix, every one of them in at least one door:
  - seconds above ~7e9 (--settle 1e30, exec --timeout 1e30) passed the declared check, launched
    the job and then overflowed the agent's clock: AgentError, exit 3, attempt 1 recorded;
  - a NUL in an argv word (API/MCP command) or a text option (log, sh, cwd) reached the agent:
    StartFailed exit 1 with attempt 1 written, or AgentError exit 3 (ValueError: embedded null byte);
  - lint_command(["pkill", "-f", "x"]) answered ok, "no findings", for a command it never read;
  - on=["local"] and deploy(name=None) raised a TypeError out of the API; on=5 said "empty target".
"""

from __future__ import annotations

import json
import sys

import pytest

from conftest import fresh_name, marked, nothing_started

# the interpreter itself, not `python3` on PATH: a pyenv shim there runs bash helpers before its
# exec, which a look at the run's processes right after its start would take for the job's
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


BAD_START = [
    ({"settle": 1e30}, ["--settle", "1e30"]),
    ({"settle": 1e12}, ["--settle", "1e12"]),
    ({"grace": 1e30}, ["--grace", "1e30"]),
    ({"command": ["python3", "-c", "import time; time.sleep(600)", "a\0b"]}, None),
    ({"log": "/tmp/rvC\0log"}, None),
    ({"cwd": "/tmp\0x"}, None),
]


@pytest.mark.parametrize("kw,words", BAD_START, ids=[repr(k) for k, _ in BAD_START])
def test_start_refuses_huge_seconds_and_nul_before_anything_is_launched(cli, lib, kw, words):
    name = fresh_name("rvCs")
    res = lib.start(name, **{"command": SLEEP, "settle": 0.2, **kw})
    assert res.exit_code == 2 and res.error["type"] == "BadInput", res.to_json()
    nothing_started(cli, name)
    if words:
        rc, doc = cli.json("start", name, *words, "--", *SLEEP)
        assert rc == 2 and doc["error"]["type"] == "BadInput", doc
        nothing_started(cli, name)


def test_exec_refuses_a_huge_timeout_and_nul_as_bad_input_not_an_agent_crash(cli, lib):
    for kw in ({"command": ["true"], "timeout": 1e30}, {"command": ["echo", "a\0b"]}, {"sh": "echo a\0b"}):
        res = lib.exec(**kw)
        assert res.exit_code == 2 and res.error["type"] == "BadInput", (kw, res.to_json())
    rc, doc = cli.json("exec", "--timeout", "1e30", "--", "true")
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc


def test_lint_of_a_non_string_is_refused_not_an_all_clear(lib):
    res = lib.lint_command(["bash", "-c", "pkill -f train"])
    assert res.exit_code == 2 and res.error["type"] == "BadInput", res.to_json()
    assert lib.lint_command(5).exit_code == 2


def test_api_on_and_name_of_the_wrong_type_are_bad_input_results(lib):
    for call in (lambda: lib.status(on=["local"]), lambda: lib.gpus(on=["local"]), lambda: lib.ps("x", on=5),
                 lambda: lib.deploy(None), lambda: lib.deploy(5), lambda: lib.stop(5),
                 lambda: lib.status(config=5), lambda: lib.named_targets(config=["x"]),
                 lambda: lib.start(fresh_name("rvCf"), SLEEP, config=5)):
        res = call()  # was: TypeError out of the API (on=5: "empty target")
        assert res.exit_code == 2 and res.error["type"] == "BadInput", res.to_json()
        assert "empty target" not in res.error["message"], res.to_json()


def test_mcp_huge_seconds_and_nul_are_bad_input_and_nothing_started(cli):
    pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
    import anyio
    from helpers_mcp import _session
    name = fresh_name("rvCm")
    cases = [("start", {"name": name, "command": SLEEP, "settle": 1e30}),
             ("start", {"name": name, "command": [*SLEEP, "a\0b"], "settle": 0.2}),
             ("start", {"name": name, "command": SLEEP, "cwd": "/tmp\0x", "settle": 0.2}),
             ("exec", {"command": ["true"], "timeout": 1e30})]
    got = []

    async def main():
        async with _session(cli.env, cli.cwd, ["--allow", "all"]) as s:  # a start's own command: exec's switch
            for tool, args in cases:
                with anyio.fail_after(60):
                    res = await s.call_tool(tool, args)
                text = res.content[0].text if res.content else ""
                try:
                    doc = json.loads(text)
                except ValueError:
                    doc = {"not_json": text[:300]}
                got.append((tool, args, res.is_error, doc))

    anyio.run(main)
    bad = [g for g in got if not (g[2] and (g[3].get("error") or {}).get("type") == "BadInput"
                                  and g[3]["error"].get("exit_code") == 2)]
    assert not bad, bad
    nothing_started(cli, name)


def test_restart_with_huge_settle_refused_before_the_stop_the_old_attempt_lives(cli, lib):
    """Old code: the stop ran, attempt 2 was launched and left running, and the answer was
    AgentError exit 3, 'restart failed at step start' (a failure reported for a live run)."""
    from conftest import alive
    name = fresh_name("rvCr")
    res = lib.start(name, SLEEP, settle=0.2)
    assert res.ok, res.to_json()
    procs = marked(name + ".")
    assert procs and all(alive(p, st) for p, st in procs.items()), procs
    try:
        for call in (lambda: lib.restart(name, settle=1e30), lambda: cli.json("restart", name, "--settle", "1e30")):
            out = call()
            rc, doc = (out.exit_code, out.to_json()) if hasattr(out, "exit_code") else out
            assert rc == 2 and doc["error"]["type"] == "BadInput", doc
            assert all(alive(p, st) for p, st in procs.items()), "a refused restart stopped the run"
            assert not (cli.home / "runs" / name / "attempts" / "2.json").exists(), "a refused restart launched"
    finally:
        lib.stop(name, grace=2)


def test_compare_attempts_checked_alike_in_each_door(cli, lib):
    """MCP's schema refuses a=0 or 1.5 (BadInput, exit 2); the API compared attempt 1 for a=1.5
    or a=True and said RunNotFound (4) for 0, as the CLI did for `compare NAME 0 2`."""
    name = fresh_name("rvCc")
    assert lib.start(name, SLEEP, settle=0.2).ok
    try:
        assert lib.restart(name, settle=0.2).ok
        for a in (1.5, True, 0, -1, "x"):
            res = lib.compare(name, a, 2)
            assert res.exit_code == 2 and res.error["type"] == "BadInput", (a, res.to_json())
        for words in (["0", "2"], ["-1", "2"]):
            rc, doc = cli.json("compare", name, *words)
            assert rc == 2 and doc["error"]["type"] == "BadInput", doc
        assert lib.compare(name, 1, 2).ok
    finally:
        lib.stop(name, grace=2)


def test_watch_floor_or_ceiling_of_nan_or_inf_is_refused_not_a_silent_verdict(cli, lib):
    """--min tok_s=nan was a floor that never alerts (healthy, exit 0), inf one that always does."""
    name = fresh_name("rvCw")
    for kw, words in (({"min": {"tok_s": float("nan")}}, ["--min", "tok_s=nan"]),
                      ({"max": {"loss": float("inf")}}, ["--max", "loss=inf"])):
        res = lib.watch(name, for_s=1, **kw)
        assert res.exit_code == 2 and res.error["type"] == "BadInput", res.to_json()
        rc, doc = cli.json("watch", name, "--for", "1", *words)
        assert rc == 2 and doc["error"]["type"] == "BadInput", doc


def test_a_stop_whose_checkpoint_signal_ends_the_job_is_not_already_stopped(cli):
    """A job alive when the stop began (pid in /proc), killed by the stop's own checkpoint
    signal (SIGUSR1, unhandled): the stop said already_stopped true, state "lost", and left
    no "stopped" in the attempt's record, as if it had found the run dead."""
    from conftest import alive
    name = fresh_name("rvCk")
    rc, doc = cli.json("start", name, "--settle", "0.3", "--", *SLEEP)
    assert rc == 0, doc
    procs = marked(name + ".")
    assert procs and all(alive(p, st) for p, st in procs.items()), procs
    rc, doc = cli.json("stop", name, "--checkpoint-wait-for", "saved", "--checkpoint-timeout", "20")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not any(alive(p, st) for p, st in procs.items())
    assert doc["result"]["checkpoint"].get("ended"), doc  # the checkpoint signal ended it
    assert doc["result"]["already_stopped"] is False and doc["result"].get("state") != "lost", doc
    rec = json.loads((cli.home / "runs" / name / "attempts" / "1.json").read_text())
    assert rec.get("stopped", {}).get("verified_dead") is True, rec
