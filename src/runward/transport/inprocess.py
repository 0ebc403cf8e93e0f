"""A local read-only call answered by the agent's code in this process (the start-up budget:
`runward status --json` within 3x `python3 -c pass`, bench/startup.py), not a second Python.

Only where that is safe: the CLI's own process (cli.main turns it on by handing in the agent's
serve(), so this layer imports none of the agent's code above its boot; the Python API and the
long-lived MCP server keep one agent process per call, isolated), the target `local`, and
ops that only read (status). A local agent is this same interpreter (sys.executable) on
this same machine, user, RUNWARD_HOME and environment, so it sees what a spawned one would
see; it answers through the same serve() and the same reply lines, read by the same
Replies, so the document is the same (tests/test_inprocess.py, tests/test_golden_json.py).
What a spawned agent would have done apart from that and what would be lost here: nothing a
status does (no signal, no fork, no exit, no child left: the py-spy it runs on a stall's first
sight is waited for; it writes only its runs' side state), and the CLI ends right after.
"""

from __future__ import annotations

import io
import json

from .exchange import Replies

OPS = frozenset(("status",))  # read-only, one reply, nothing left running
ON = []  # [the agent's serve] once cli.main has said this process is the CLI's


def wanted(target, req: dict, payload, late, timeout=None) -> bool:
    """Whether this call is answered here. Not in a thread (a fan-out's): the agent keeps
    its call's event sink in module globals, and its lock wait arms SIGALRM, which only the
    main thread may. Not for an engine's target (its status asks the engine: left as it was), nor
    with a home of the target's own, nor when a value of ours is kept out of our children's
    environment (targets/sshconf.HIDDEN_ENV): a spawned agent would not see it. Not with a timeout
    (an interrupted start's look at its run: 5 s at most): a spawned agent is killed when it
    is up, this process cannot cut its own read short (a status waits up to 15 s for
    nvidia-smi, a /proc read of a stuck process for ever)."""
    if not (ON and timeout is None and target.is_local and target.engine is None and req.get("op") in OPS
            and payload is None and late is None):
        return False
    import sys
    threading = sys.modules.get("threading")
    if threading is not None and threading.current_thread() is not threading.main_thread():
        return False
    from ..targets.sshconf import HIDDEN_ENV
    return not req.get("home") and not HIDDEN_ENV


class _Lines(io.RawIOBase):
    """The agent's stdout: each complete line handed to Replies as it is written, so a
    notice (a lock waited on) is said while the call waits, as from a spawned agent."""

    def __init__(self, got: Replies):
        self.got, self.buf = got, b""

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.buf += bytes(b)
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            self.got.take(line + b"\n")
        return len(b)


def call(req: dict, on_event) -> dict | None:
    """The agent's reply to req, or None where it gave none (the caller then spawns one)."""
    from ..cache import local_home, make_private_dir
    try:
        # a spawned agent's call made the home 0700 (an older runward's 0755 narrowed) on its
        # way, when the CLI wrote its cache (cache.make_private_dir): the same here, whose
        # route writes none (test_home_mode). That one, not the agent's Home.ensure(): a
        # status makes no runs/, and a home that is a symlink is not narrowed through it
        make_private_dir(local_home())
    except OSError:
        pass  # not ours alone: the op itself says so, as it would to a spawned agent
    got = Replies(on_event)
    serve = ON[0]
    serve(io.BytesIO(json.dumps(req).encode() + b"\n"), _Lines(got))
    return got.reply
