"""The multi-node GPU gate's protocol on real sockets on 127.0.0.1: a free port, a node's mn block,
each node's wait as a thread of its own (Side), as the shims run it."""

from __future__ import annotations

import socket
import threading

from runward.agent.supervise import gatebarrier


def _mn(rank: int, port: int, nnodes: int = 2) -> dict:
    return {"rank": rank, "nnodes": nnodes, "id": "gate-test", "secret": "s3cret", "master_addr": "127.0.0.1",
            "coord_port": port, "nodes": [{"on": "ssh://n%d" % i} for i in range(nnodes)]}


def _port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Stop(Exception):
    pass


class Side(threading.Thread):
    """One node's wait: its GPUs held (never free) or not, its stop's mark an Event."""

    def __init__(self, mn, free=False):
        threading.Thread.__init__(self, daemon=True)
        self.mn, self.free, self.stop, self.outcome, self.notes = mn, free, threading.Event(), None, []

    def on_poll(self):
        if self.stop.is_set():
            raise Stop()

    def run(self):
        try:
            gatebarrier.wait(self.mn, lambda: (self.free, None if self.free else "GPU 1 held"), self.on_poll,
                             self.notes.append)
            self.outcome = "go"
        except gatebarrier.PeerStopped as p:
            self.outcome = "peer stopped: " + p.reason
        except Stop:
            self.outcome = "stopped"


def _ended(side, within=15.0):
    side.join(within)
    return not side.is_alive()
