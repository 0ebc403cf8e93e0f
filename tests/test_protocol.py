"""The wire constants the CLI reads from the agent's text are the agent's own."""

from runward import agent, transport


def test_wire_constants_match_the_agent_module():
    proto, boot = transport.wire_constants()
    assert proto == agent.PROTOCOL and boot == agent.BOOTSTRAP


def test_request_of_another_version_is_refused(cli):
    import io
    import json
    out = io.BytesIO()
    rc = agent.serve(io.BytesIO(json.dumps({"v": 999, "op": "ping"}).encode() + b"\n"), out)
    reply = json.loads(out.getvalue())
    assert rc == 2 and reply["ok"] is False and "protocol version" in reply["error"]["message"]
