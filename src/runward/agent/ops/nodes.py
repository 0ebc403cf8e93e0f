"""The ops a CLI asks of a node that is not the one it started on: free_ports, what a
multi-node run's start asks of node 0 (and of every node, for its address) before anything is
started (docs/multinode.md); node_check, an engine job's stop finished on a node not its head
(transport/nodeagents.py)."""

import os
import socket


def free_ports(req, home):
    """COUNT ports free on this node now (the kernel's choice for port 0: all held at once,
    so they differ), and this node's address as the caller reached it: the server side of
    SSH_CONNECTION, when the call came over ssh. Like torchrun's own choice of a free port,
    a port may be taken again between this answer and the job's bind: the job then fails
    to start, and the start is all or nothing."""
    count = int(req.get("count") or 0)
    if not 0 <= count <= 8:
        from ..core.wire import bad_input
        raise bad_input("invalid port count %r" % (req.get("count"),), "ask for 0 to 8 ports")
    held = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("", 0))
            held.append(s)
        ports = [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()
    conn = (os.environ.get("SSH_CONNECTION") or "").split()
    return {"ports": ports, "address": conn[2] if len(conn) == 4 else None, "host": os.uname().nodename}


def node_check(req, home):
    """An engine job's processes on a node that is not its head, stopped by the engine's own
    ops/NAMEnode.py check(req, home) (transport/nodeagents.py asks it, the engine's NAME in
    the request): one op for every engine, the engine's code in the engine's module."""
    from . import node_ops
    from ..core import launchers
    from ..core.wire import bad_input
    name = req.get("engine")
    if name not in launchers.LAUNCHERS:
        raise bad_input("node_check: unknown engine %r" % (name,), "one of: " + ", ".join(launchers.LAUNCHERS))
    try:
        module = node_ops(name)
    except ImportError:
        raise bad_input("node_check: the engine %r has no node check" % (name,))
    return module.check(req, home)
