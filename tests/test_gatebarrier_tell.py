"""The multi-node GPU gate's cancel reaches every node even when the node stopped was not
connected at that moment (CI, stop 34: `stop --on n1` right after a blocked restart marked
node 1 before its shim had joined node 0; node 0 waited on, forever). gatebarrier.wait on
real sockets on 127.0.0.1, each side in a thread of its own, as the shims run it."""

from __future__ import annotations

import socket
import time


from runward.agent.supervise import gatebarrier
from helpers_gatebarrier import Side, _ended, _mn, _port


def test_a_member_stopped_before_it_joined_tells_node_0():
    port = _port()
    node0 = Side(_mn(0, port), free=True)
    node1 = Side(_mn(1, port))
    node1.stop.set()  # its stop's mark was there before its first poll: it never connected
    node0.start()
    node1.start()
    assert _ended(node1) and node1.outcome == "stopped", node1.outcome
    assert _ended(node0), "node 0 waited on for a member that was stopped before it joined"
    assert node0.outcome == "peer stopped: node 1 (ssh://n1) was stopped while every node waited for the GPUs", \
        node0.outcome


def test_node_0_stopped_before_a_member_joined_tells_it():
    port = _port()
    node0 = Side(_mn(0, port), free=True)
    node1 = Side(_mn(1, port))
    node0.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # node 0 listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    node0.stop.set()
    time.sleep(gatebarrier.POLL_S * 2)  # node 0 has seen its mark: the member joins after it
    node1.start()
    assert _ended(node0) and node0.outcome == "stopped", node0.outcome
    assert _ended(node1), "the member waited on for node 0, stopped before the member joined"
    assert node1.outcome.startswith("peer stopped: node 0 (ssh://n0) was stopped"), node1.outcome


def test_a_member_stopped_with_node_0_gone_ends_without_waiting_long():
    """Nobody listens (node 0's host down): the member's stop still ends, within its bound."""
    port = _port()
    node1 = Side(_mn(1, port))
    node1.stop.set()
    t0 = time.monotonic()
    node1.start()
    assert _ended(node1, gatebarrier.TELL_S + 5) and node1.outcome == "stopped", node1.outcome
    assert time.monotonic() - t0 <= gatebarrier.TELL_S + 3


def test_both_free_go_together():
    """The control: nobody stopped, both free: both go (the tell changes nothing here)."""
    port = _port()
    sides = [Side(_mn(r, port), free=True) for r in (0, 1)]
    for s in sides:
        s.start()
    assert all(_ended(s, 20) for s in sides) and [s.outcome for s in sides] == ["go", "go"], \
        [s.outcome for s in sides]
