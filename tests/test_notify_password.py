"""A notify URL with a password (issue 25): the event is delivered with HTTP Basic auth, and the
password lands in no file nor output; a restart from the recorded spec, which keeps only the
masked URL, refuses before it stops anything. Real webhook server, real shim."""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
import uuid
from pathlib import Path

from conftest import fresh_name, wait_for

PASSWORD = "s3cr3t-Hunter2-%s" % uuid.uuid4().hex[:8]


class _AuthHook(http.server.BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        want = "Basic " + base64.b64encode(("alice:" + PASSWORD).encode()).decode()
        if self.headers.get("Authorization") != want:
            self.send_response(401)
            self.end_headers()
            return
        self.got.append({"path": self.path, "host": self.headers.get("Host"), "event": json.loads(body)})
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        pass


def _files_holding(root: Path, needle: bytes) -> list[str]:
    out = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                if needle in p.read_bytes():
                    out.append(str(p))
            except OSError:
                pass
    return out


def test_a_notify_url_with_a_password_is_delivered_with_basic_auth_and_the_password_is_nowhere(cli):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AuthHook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    name = fresh_name("nb")
    url = "http://alice:%s@127.0.0.1:%d/hook" % (PASSWORD, server.server_address[1])
    try:
        rc, doc = cli.json("start", name, "--restart", "on-failure", "--max-restarts", "1", "--backoff", "0",
                           "--settle", "0.2", "--notify", url, "--sh", "exit 3")
        outputs = [json.dumps(doc)]
        st = wait_for(lambda: (lambda s: s if s["state"] == "gave_up" else None)(cli.status(name)),
                      what="state gave_up")
        kinds = ["exited", "restarted", "exited", "gave_up"]
        wait_for(lambda: len(_AuthHook.got) >= len(kinds), what="every webhook POST, with its Basic auth")
        assert sorted(g["event"]["event"] for g in _AuthHook.got) == sorted(kinds), _AuthHook.got
        assert {g["path"] for g in _AuthHook.got} == {"/hook"}
        assert all("alice" not in g["host"] and PASSWORD not in g["host"] for g in _AuthHook.got)
        for args in (("status", name), ("status", name, "--json"), ("logs", name)):
            p = cli.run(*args)
            outputs.append(p.stdout + p.stderr)
        outputs.append(json.dumps(st))
        assert not [o for o in outputs if PASSWORD in o], outputs
        # the user name is still shown (which hook), the password masked
        wait_for(lambda: not _shim_alive(cli.home, name), what="the shim to end")
        assert not _files_holding(cli.home, PASSWORD.encode())
        log = Path(json.loads((cli.home / "runs" / name / "attempts" / "1.json").read_text())["log"])
        assert log.exists() and PASSWORD.encode() not in log.read_bytes()
    finally:
        server.shutdown()


def _shim_alive(home: Path, name: str) -> bool:
    from conftest import alive
    for f in (home / "runs" / name / "attempts").glob("*.json"):
        shim = json.loads(f.read_text()).get("shim")
        if shim and alive(shim["pid"], shim["start"]):
            return True
    return False


def test_restart_from_the_spec_refuses_a_notify_password_it_cannot_send_and_stops_nothing(cli):
    """The records keep the notify URL's password masked: a restart from the last spec has
    only *** to send, so it refuses (exit 2) before the old attempt is touched."""
    from conftest import alive
    name = fresh_name("nr")
    url = "http://alice:%s@127.0.0.1:9/hook" % PASSWORD
    rc, doc = cli.json("start", name, "--restart", "on-failure", "--settle", "0.2", "--notify", url,
                       "--", "sleep", "600")
    assert rc == 0, doc
    pid, start = doc["result"]["pid"], doc["result"]["start_time"]
    rc, doc = cli.json("restart", name)
    assert rc == 2 and doc["error"]["type"] == "BadInput" and "notify" in doc["error"]["message"], doc
    assert PASSWORD not in json.dumps(doc)
    assert alive(pid, start) and cli.status(name)["attempt"] == 1
    rc, doc = cli.json("stop", name, "--grace", "2")
    assert rc == 0 and doc["result"]["verified_dead"], doc
