"""The relay's processes as /proc shows them, a call through it, and its control master ended: for
the tests of the relay and of the ssh control master it keeps."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import alive, wait_for
from runward.transport import agentcall as transport
from runward.targets import parse_target
from helpers_resident import _records


RELAY = b"relay.py"


def _relays(listen: str | None = None) -> list[int]:
    """pids of the local relays (of the one listening at listen)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(c.endswith(b"/runward/transport/" + RELAY) for c in cmd) and (listen is None or listen.encode() in cmd):
            out.append(int(d))
    return out


def _paths(far) -> tuple[str, str]:
    name = _records(far.entry())[-1]
    d = transport.control_dir()
    return os.path.join(d, "r-" + name), os.path.join(d, "p-" + name)


def _through_relay(far) -> str:
    """Calls until one goes through the relay (the first starts the resident, the second
    starts the relay with its connection); the relay's listening path."""
    far.call({"op": "status"})
    assert transport.LAST_ROUTE == "exec"
    wait_for(far.listening, what="the resident's socket")
    far.call({"op": "status"})
    assert (transport.LAST_ROUTE, transport.LAST_WAY) == ("resident", "forward")
    listen = _paths(far)[1]
    wait_for(lambda: _relays(listen) and os.path.exists(listen), what="the relay to listen")
    far.call({"op": "status"})
    assert (transport.LAST_ROUTE, transport.LAST_WAY) == ("resident", "relay")
    return listen


def _end_master(far) -> str:
    """A relay at work, then its control master told to exit, and a call after it (the
    ordinary way, a new master and forward); the old relay's listening path, once it exited."""
    listen = _through_relay(far)
    pid = _relays(listen)[0]
    rw1 = parse_target("ssh://rw1").hops[0]
    subprocess.run(rw1.ssh_argv(transport.ssh_base(), ["-O", "exit"]), capture_output=True, check=True)
    far.call({"op": "status"})  # a new master: the ordinary way, a new forward after it
    assert transport.LAST_ROUTE == "exec"
    wait_for(lambda: not alive(pid), what="the old master's relay to exit")
    return listen
