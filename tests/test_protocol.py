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


def test_wire_cache_gives_the_same_bytes_as_computing_them(tmp_path, monkeypatch):
    import hashlib
    import zlib
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path))
    monkeypatch.setattr(transport, "_SOURCE", None)
    first = transport.agent_source()
    assert list((tmp_path / "cache").glob("wire-*")), "the cache file was not written"
    monkeypatch.setattr(transport, "_SOURCE", None)
    second = transport.agent_source()
    src = open(agent.__file__, "rb").read()
    assert first == second
    assert zlib.decompress(second[0]) == src and second[1] == hashlib.sha256(src).hexdigest()
