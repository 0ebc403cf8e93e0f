"""The oracle's `logs -f` check (invariant 7) counts only what the follow started, in a container
others use too (docs/testing.md, "logs -f in a shared container").

The podman soak (seed 14000, ~500 steps) once said `inv7 ...: logs -f ended (Ctrl-C), still
running: [an agent's sh, its python]`. The follower itself ends within a second of the Ctrl-C
there (EOF on its stdin through ssh, podman and conmon; 0.03-2.2 s measured at load 6-16,
nice 19 or not); what the check found was any agent new in rwpod's pid namespace, and rwpod
is shared with every test and helper: another caller's follower begun in the window was
taken for ours, and ran on with its own caller. The check now follows a container agent's
host-side ancestry to a process of ours (through podman's conmon to its `podman exec`)."""

from __future__ import annotations

import subprocess
import time

import pytest

import testbed
from oracle import machine, more, truth, world

FOREIGN = "import sys,os,marshal; sys.stdin.read()"  # an agent's bootstrap words, another caller's


def _foreign_argv(kind: str) -> list[str]:
    """Another caller's agent-shaped process in the container KIND's target lives in."""
    inner = ["python3", "-S", "-c", FOREIGN]
    if kind == "podman":
        return ["podman", "exec", "-i", testbed.load()["podman"], *inner]
    return ["pct", "exec", "200", "--", *inner]


@pytest.mark.parametrize("kind", ["podman", "pct", "podown", "pctw"])
def test_only_the_follows_own_agents_in_a_container_are_counted(monkeypatch, kind):
    """In the shared containers (rwpod, pct:200) another caller's agent begun in the window is
    not the follow's; in every container kind the follow's own agent is still found (through
    conmon to its podman exec, through lxc-attach to its ssh session or the CLI)."""
    why = world.why_not(kind)
    if why:
        pytest.skip(why)
    found = []
    foreign = []
    real = more.follow_procs

    def with_a_foreign_agent(session, target, before):
        if kind in ("podman", "pct"):   # another caller's agent starts there while ours follows
            p = subprocess.Popen(_foreign_argv(kind), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 env=testbed.env())
            foreign.append(p)
            end = time.monotonic() + 30
            while not [q for q in truth.scan((FOREIGN,)) if q.pidns == target.pidns]:
                assert time.monotonic() < end and p.poll() is None, "the foreign agent never started in the container"
                time.sleep(0.1)
        got = real(session, target, before)
        found.append((target.pidns, got))
        return got

    monkeypatch.setattr(more, "follow_procs", with_a_foreign_agent)
    state = machine.make([kind])()
    try:
        state.start(k=0, sh=False, supervised=False)
        state.all_true()
        state.logs_follow_interrupted(i=0)   # a Violation (inv7) when the foreign agent is counted
        state.all_true()
    finally:
        state.teardown()
        for p in foreign:
            p.stdin.close()   # EOF: the foreign agent ends
            p.wait(timeout=30)
    assert found, "the follow rule did not run"
    pidns, got = found[0]
    assert not [q for q in got if FOREIGN in q.cmdline], got
    # not weaker: our own follower in the container is still found (the check reads it gone)
    assert [q for q in got if q.pidns == pidns and more.BOOTSTRAP in q.cmdline], got
