"""The relay (runward/transport/relay.py), reviewed hostile: what it must not take from the process that
starts it, and the CLI's side of starting it from many threads at once. Real processes; what
is true is read from /proc, never from runward's own word."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import threading

from conftest import alive, wait_for
from runward.transport import residentroute, agentcall as transport
from runward.targets import parse_target
from helpers_resident import far  # noqa: F401  (the fixture)


def _fds(pid: int) -> dict[int, str]:
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return out


def _end(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    if pid in residentroute._SPAWNED:
        residentroute._SPAWNED.remove(pid)


@contextlib.contextmanager
def _bare_relay(tmp_path):
    """A relay started as the CLI starts one, handed one end of a socketpair, for a forward
    that is a plain file (there, so the relay stays until killed; it leads nowhere, as a
    master gone). Yields (pid, forward); the relay is killed and reaped after."""
    forward = tmp_path / "r-x"
    forward.write_text("")
    listen = tmp_path / "p-x"
    mine, given = socket.socketpair()
    pid = None
    try:
        residentroute._start_relay(str(listen), str(forward), 60.0, given)
        given.close()
        pid = residentroute._SPAWNED[-1]
        wait_for(lambda: os.path.exists(listen), what="the relay to listen")
        yield pid, forward
    finally:
        mine.close()
        if pid:
            _end(pid)


def test_the_relay_keeps_no_descriptor_of_its_caller_nor_its_directory(tmp_path, monkeypatch):
    """A relay outlives its CLI by the idle time (600 s): what the CLI inherited must not live
    on in it. A cron job's `exec 9>lock; flock -n 9 || exit; runward status ...` left the lock
    held for ten minutes after the job ended (the next run: "already running"), and a pipe
    passed down kept its reader waiting for EOF; the CLI's cwd (a project on a mount) stayed
    busy."""
    lock_path = tmp_path / "cron.lock"
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    os.set_inheritable(lock, True)  # as a shell's `exec 9>file` leaves it
    fcntl.flock(lock, fcntl.LOCK_EX)
    r, w = os.pipe()
    os.set_inheritable(w, True)
    monkeypatch.chdir(tmp_path)
    try:
        with _bare_relay(tmp_path) as (pid, _):
            held = _fds(pid)
            assert str(lock_path) not in held.values(), held
            assert not any(t.startswith("pipe:") for t in held.values()), held
            assert held.get(3, "").startswith("socket:")  # the connection it was handed stays
            assert os.readlink(f"/proc/{pid}/cwd") == "/"
            os.close(lock)
            lock = None
            os.close(w)
            w = None
            other = os.open(lock_path, os.O_RDWR)  # the job's lock is free once the job is gone
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(other)
            os.set_blocking(r, False)
            assert os.read(r, 1) == b""  # EOF: no writer left
    finally:
        for fd in (lock, w, r):
            if fd is not None:
                os.close(fd)


def test_relays_started_from_many_threads_at_once(monkeypatch):
    """A long-lived caller (import runward; an MCP server) asks several hosts at once, each
    from a thread: each may start a relay, and each start reaps the relays that have exited.
    Two threads reaping the same one raised ValueError (list.remove) out of runward.status."""
    gone = os.posix_spawn("/bin/true", ["/bin/true"], {})
    wait_for(lambda: open(f"/proc/{gone}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
             what="the exited relay to be a zombie")
    monkeypatch.setattr(residentroute, "_SPAWNED", [gone])
    real = os.waitpid
    both = threading.Barrier(2)

    def waitpid(pid, flags):
        try:
            both.wait(timeout=2)  # both threads at the same exited relay (where it can be)
        except threading.BrokenBarrierError:
            pass
        return real(pid, flags)

    def spawn(*a, **kw):
        raise OSError("not started in this test")
    monkeypatch.setattr(os, "waitpid", waitpid)
    monkeypatch.setattr(os, "posix_spawn", spawn)
    errors = []
    socks = [socket.socketpair() for _ in range(2)]

    def start(conn):
        try:
            residentroute._start_relay("/nonexistent/p-x", "/nonexistent/r-x", 1.0, conn)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=start, args=(s[0],)) for s in socks]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        for a, b in socks:
            a.close()
            b.close()
        try:
            real(gone, os.WNOHANG)
        except ChildProcessError:
            pass
    assert not errors, errors
    assert residentroute._SPAWNED == []


def test_a_relay_that_has_stopped_is_not_waited_for(tmp_path):
    """A relay stopped (SIGSTOP, a debugger, a frozen cgroup) still has its socket: the kernel
    queues the connection and the request, and the call waited for its reply forever
    (`runward status` hung, though the forward to the resident worked). A stopped relay is
    passed by: the call goes through the forward."""
    with _bare_relay(tmp_path) as (pid, forward):
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] in "Tt",
                 what="the relay to stop")
        r = residentroute.Resident(parse_target("ssh://rw1"), {"op": "status"}, None, "sha key", ["@sha key\tx"])
        r.forward = str(forward)  # a file, not a socket: the forward leads nowhere (as a master gone)
        got = []
        t = threading.Thread(target=lambda: got.append(r.call("sha", b'{"v": 1, "op": "status"}\n', None, None)),
                             daemon=True)
        t.start()
        t.join(10)
        assert got == [None], "the call waited on a stopped relay"


def test_a_resident_that_ended_idle_is_no_failure(far, monkeypatch):
    """A resident exits after its idle time (600 s by default) and removes its socket: the
    next call's forward gets no reply, and that was counted as a failed try. Two such gaps in
    a row (status at 9:00, 11:00, 14:00) and the CLI stopped trying the resident, and so the
    relay, for good (this agent version): every warm call paid the ordinary way again. A
    resident that ended on its own is told (no socket left behind) from one killed (its
    socket stays), and only the second counts."""
    from helpers_resident import _records
    monkeypatch.setenv("RUNWARD_RESIDENT_IDLE", "2")
    far.call({"op": "status"})
    assert transport.LAST_ROUTE == "exec"
    for _ in range(2):  # a call after each idle gap, none between (a cron job)
        pid = wait_for(far.resident, what="the resident")  # (its lock: nothing connects to it)
        wait_for(lambda: not alive(pid), timeout=30, what="the resident to end idle")
        far.call({"op": "status"})  # the forward leads to no resident: the ordinary way starts one
        assert transport.LAST_ROUTE == "exec"
    wait_for(far.listening, what="the new resident's socket")
    far.call({"op": "status"})
    assert transport.LAST_ROUTE == "resident", _records(far.entry())


def test_a_killed_resident_still_counts_as_a_failure(far):
    """(The rule above keeps its reason: a resident killed each time, its socket left behind,
    is given up after two tries in a row.)"""
    from helpers_resident import _records
    far.call({"op": "status"})
    for _ in range(2):
        pid = wait_for(far.resident, what="the resident")
        wait_for(far.listening, what="its socket")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not alive(pid), what="the resident to die")
        far.call({"op": "status"})
        assert transport.LAST_ROUTE == "exec"
    assert _records(far.entry())[-2:] == ["!", "!"]
    far.call({"op": "status"})
    assert transport.LAST_ROUTE == "exec"  # given up: not tried again


def test_a_master_gone_leaves_no_relay_files_behind(far):
    """Every control master that exits (ControlPersist, a link down) ends a forward and its
    relay; the next call sets up a new one. The old relay's lock file stayed in the control
    directory for good (one more file for every master gone)."""
    from helpers_relay import _end_master
    listen = _end_master(far)
    left = sorted(n for n in os.listdir(os.path.dirname(listen)) if n.startswith(os.path.basename(listen)))
    assert left == [], left


def test_a_stopped_far_child_of_a_kept_connection_is_passed_by(far):
    """A kept connection's child on the far side stopped (SIGSTOP, a debugger) still has its
    connection: the relay sent the next call's request on it and waited for the reply
    without end (the forward's fresh child per connection never had this). The far child
    now says it took a request (an empty line) before it runs it; a kept connection silent
    for the relay's ACK_S is let go and the call asked on another."""
    from helpers_follow import _children
    from helpers_relay import _through_relay
    _through_relay(far)
    kept = _children(far.resident())
    assert kept
    for p in kept:
        os.kill(p, signal.SIGSTOP)
    try:
        got = []

        def ask():
            got.append(far.call({"op": "status"}))
            got.append(transport.LAST_WAY)
        t = threading.Thread(target=ask, daemon=True)
        t.start()
        t.join(45)
        assert len(got) == 2 and got[1] == "relay", "the call waited on a stopped far child"
    finally:
        for p in kept:
            os.kill(p, signal.SIGCONT)
