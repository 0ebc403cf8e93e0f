"""The MCP door refuses the values the library refuses, where its schema's type would convert
them: gpus=[True] or [1.0] or ["0"] and settle="0.5" are refused by `runward.start` (exit 2,
BadInput), and an MCP start given them must not start a job with other GPUs than it was told.
Real server (`python -m runward mcp` through the SDK's client), checked against /proc.

Found by the review of issue 40: the tools' declared types come from the options' kinds
(mcp/tools.py), and the SDK's validation converts in lax mode (True -> 1, "0" -> 0) before
apivalues' check sees the value."""
from __future__ import annotations

import json

import pytest

from conftest import fresh_name, marked, nothing_started

SLEEP = ["python3", "-c", "import time; time.sleep(600)"]
# and a list or dict given as its JSON text, which the SDK parses before validating
CASES = [{"gpus": [True]}, {"gpus": [1.0]}, {"gpus": ["0"]}, {"settle": "0.5"}, {"gpus": "[1]"},
         {"env": '{"A": "1"}'}]


def test_mcp_start_refuses_what_the_library_refuses_and_starts_nothing(cli, lib):
    pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
    import anyio
    from helpers_mcp import _session
    # a person allows exec here, so a start with its own command passes the allow check
    (cli.cwd / "runward.toml").write_text('[mcp]\nallow = ["start", "stop", "exec", "status"]\n')
    names = [fresh_name("mcs") for _ in CASES]
    for name, kw in zip(names, CASES):
        res = lib.start(name, SLEEP, **{"settle": 0.3, **kw})
        assert res.exit_code == 2 and res.to_json()["error"]["type"] == "BadInput", (kw, res.to_json())
    got = {}

    async def main():
        async with _session(cli.env, cli.cwd) as s:
            for name, kw in zip(names, CASES):
                with anyio.fail_after(60):
                    res = await s.call_tool("start", {"name": name, "command": SLEEP, "settle": 0.3, **kw})
                got[json.dumps(kw)] = (res.is_error, json.loads(res.content[0].text))

    anyio.run(main)
    started = {json.dumps(kw): marked(name + ".") for name, kw in zip(names, CASES) if marked(name + ".")}
    bad = {k: (v[1].get("error") or v[1].get("result", {}).get("gpus")) for k, v in got.items()
           if not (v[0] and (v[1].get("error") or {}).get("type") == "BadInput")}
    assert not bad and not started, f"the MCP start took what the library refuses: {bad}; started {started}"
    for name in names:
        nothing_started(cli, name)


# switches given as words, and numbers of the wrong kind elsewhere: each refused by the library as
# BadInput before it acts; lax, the SDK made "yes" true (a kill with confirm "yes" signals what matches)
SWITCHES = [("start", {"replace": "yes"}), ("restart", {"deploy": "yes"}), ("kill", {"confirm": "yes"}),
            ("logs", {"lines": 1.0})]


def test_mcp_switches_and_whole_numbers_are_refused_as_the_library_refuses_them(cli, lib):
    pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
    import anyio
    from helpers_mcp import _session
    (cli.cwd / "runward.toml").write_text('[mcp]\nallow = ["start", "restart", "kill", "logs", "exec", "status"]\n')
    name = fresh_name("mcw")
    # a process the kill's pattern matches: a kill taking "yes" as true would signal it
    victim = ["python3", "-c", "import time; time.sleep(600)", name]
    import subprocess
    p = subprocess.Popen(victim)
    lib_calls = {"start": lambda kw: lib.start(name, SLEEP, settle=0.3, **kw),
                 "restart": lambda kw: lib.restart(name, **kw),
                 "kill": lambda kw: lib.kill(name, **kw),
                 "logs": lambda kw: lib.logs(name, **kw)}
    got = {}
    try:
        for tool, kw in SWITCHES:
            res = lib_calls[tool](kw)
            assert res.exit_code == 2 and res.to_json()["error"]["type"] == "BadInput", (tool, kw, res.to_json())

        async def main():
            async with _session(cli.env, cli.cwd) as s:
                for tool, kw in SWITCHES:
                    args = {"pattern": name} if tool == "kill" else {"name": name}
                    if tool == "start":
                        args.update(command=SLEEP, settle=0.3)
                    with anyio.fail_after(60):
                        res = await s.call_tool(tool, {**args, **kw})
                    got[(tool, json.dumps(kw))] = (res.is_error, json.loads(res.content[0].text))

        anyio.run(main)
        bad = {k: v[1].get("error") or v[1].get("result") for k, v in got.items()
               if not (v[0] and (v[1].get("error") or {}).get("type") == "BadInput")}
        assert not bad, f"the MCP door took what the library refuses: {bad}"
        assert p.poll() is None, "a kill given confirm='yes' signalled the matching process"
        nothing_started(cli, name)
    finally:
        p.kill()
        p.wait()
