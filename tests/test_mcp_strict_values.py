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
CASES = [{"gpus": [True]}, {"gpus": [1.0]}, {"gpus": ["0"]}, {"settle": "0.5"}]


def test_mcp_start_refuses_what_the_library_refuses_and_starts_nothing(cli, lib):
    pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
    import anyio
    from test_mcp import _session
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
