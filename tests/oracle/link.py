"""The ssh link cut, for the oracle's `link` kind: a TCP relay of the session's own
(127.0.0.1:PORT -> rw1's sshd), so cutting it touches no other user of the testbed (its shared
relay serves every session). down() closes every connection and refuses new ones at once, as
a link whose far end went away does; up() forwards again."""

from __future__ import annotations

import socket
import threading

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule


class Relay:
    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.cut = threading.Event()
        self.lock = threading.Lock()
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(32)
        self.port = self.srv.getsockname()[1]
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            if self.cut.is_set():
                c.close()
                continue
            try:
                u = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                c.close()
                continue
            u.settimeout(None)
            with self.lock:
                self.open += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def down(self):
        self.cut.set()
        with self.lock:
            socks, self.open = self.open, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def up(self):
        self.cut.clear()

    def close(self):
        self.down()
        self.srv.close()


def ssh_config(tb: dict, port: int) -> str:
    """The testbed's ssh_config, then the relay as `rworacle-link` (rw1's host key). Include
    first: below a Host line it would apply to that host alone (other kinds share the file)."""
    return ("Include %s\n\nHost rworacle-link\n  HostName 127.0.0.1\n  Port %d\n  HostKeyAlias rw1\n"
            "  User root\n  IdentityFile %s\n" % (tb["ssh_config"], port, tb["client_key"]))


class LinkRules:
    """Mixed into machine.OracleRules: the `link` kind's fault."""

    @precondition(lambda self: "link" in self.KINDS and self.any(lambda m: m.kind == "link" and m.live))
    @rule(i=st.integers(0, 1 << 16))
    def link_cut(self, i):
        """The link to the host goes down while its runs live: every verdict during the cut is
        "unreachable" (exit 3), never dead or stopped; a stop says it could not reach the host
        and the job still lives (read from /proc); once the link is back, the invariants hold
        with the model untouched."""
        m = self.pick(i, lambda m: m.kind == "link" and m.live)
        self.acted("link_cut", m)
        kept = self.kept([m])
        self.session.relay.down()
        try:
            for args in (("status", "--on", "link"), ("status", m.name), ("stop", m.name)):
                rc, doc = self.cli(*args, kind=m.kind)
                err = (doc.get("error") or {}).get("type")
                if rc != 3 or err != "Unreachable":
                    raise self.violation("%s with the link cut: exit %d (%s), expected 3 Unreachable: %s" % (
                        " ".join(args), rc, err, str(doc)[:400]))
            self.as_they_were("status and stop of %s with the link cut" % m.name, kept)
        finally:
            self.session.relay.up()


class ContainerRules:
    """Mixed into machine.OracleRules: the `podown` kind's fault (a container of the session's
    own: the testbed's rwpod serves every session, so it is never stopped)."""

    @precondition(lambda self: "podown" in self.KINDS and self.any(lambda m: m.kind == "podown" and m.state != "removed"))
    @rule()
    def container_stopped(self):
        """The container is stopped (podman stop) under its runs: status must not say running
        (while it is down, nor after it is started again: the shims and jobs died with it); the
        runs it held are lost, their exit unknown (a stray one's job had ended: exited, as
        recorded, its escapees gone with the container)."""
        self.acted("container_stopped")
        s = self.session
        s.podman("stop", "-t", "2", s.container)
        t = s.targets["podown"]
        rc, doc = self.cli("status", "--on", "podown")
        running = [r["name"] for r in (doc.get("result") or {}).get("runs") or () if r.get("state") == "running"]
        if rc == 0 and running:
            raise self.violation("status with the container stopped says running: %s" % running)
        if rc == 0 or rc not in (3, 1):
            raise self.violation("status --on podown with the container stopped: exit %d, expected an error "
                                 "naming the container: %s" % (rc, str(doc)[:400]))
        s.podman("start", s.container)
        s.refresh(t)
        for m in self.runs.values():
            if m.kind == "podown" and m.state == "stray":   # its job's exit was recorded already
                m.state, m.escapees = "exited", 0
            elif m.kind == "podown" and m.live:
                m.state, m.exits, m.escapees, m.paused = "lost", {("unknown",)}, 0, 0
