"""A record that is not valid JSON (a hand edit, a half-restored backup) is said as such:
"record ... is not valid JSON" with its hint (store.read_json), by every agent. The agent's
fast codec (wire._accelerated, _json's scanner) reports a syntax error through
json.decoder.JSONDecodeError, which Python <= 3.11's _json takes from sys.modules only: in an
agent that never imported json the scanner set no exception, and the call died of
"SystemError: <_json.Scanner object> returned NULL without setting an exception" (a bug's
traceback). The CLI's in-process status, which has json imported, said it right: the two
routes differed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_SPAWNED = ("import sys; from runward.transport import inprocess; from runward import cli; inprocess.wanted = lambda *a, **k: False; "
            "sys.exit(cli.main(sys.argv[1:]))")


def test_a_torn_record_is_said_as_such_by_a_spawned_agent_too(cli):
    run = cli.home / "runs" / "torn-rec"
    run.mkdir(parents=True)
    os.chmod(cli.home, 0o700)
    (run / "run.json").write_text('{"attempt": 1, ')
    got = {}
    for route, argv in (("in-process", cli.argv("status", "--json")),
                        ("spawned", [sys.executable, "-c", _SPAWNED, "status", "--json"])):
        p = subprocess.run(argv, cwd=cli.cwd, env=cli.env, capture_output=True, text=True, timeout=60)
        err = json.loads(p.stdout)["error"]
        got[route] = (p.returncode, err["type"], err["message"], err.get("hint"))
    want = (3, "AgentError", f"record {run / 'run.json'} is not valid JSON", "inspect or remove the file by hand")
    assert got == {"in-process": want, "spawned": want}


def test_the_agents_codec_refuses_bad_json_with_a_value_error():
    """wire.json_loads in a fresh interpreter (no json imported), as the agent runs."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from runward.agent.core import wire\n"
            "assert 'json' not in sys.modules\n"
            "for bad in ('{bad', '[1,', '{\"a\": }', 'nul', '\"x'):\n"
            "    try:\n        wire.json_loads(bad)\n    except ValueError:\n        pass\n"
            "    else:\n        raise SystemExit('accepted %r' % bad)\n"
            "print('ok')")
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    p = subprocess.run([sys.executable, "-S", "-c", code, src], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "ok", p.stderr[-800:]
