"""One exchange with a spawned agent process (transport/agentcall.py's split, by concern): the child
started by posix_spawn with its stdout an unlinked file and no stray descriptor, its stdin fed
(the blob, the request, a payload) from a thread, its event lines and one reply read back
(and a binary op's data frames handed on); what the far side printed that is not JSON kept
for transport/diagnosis.py."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable

from ..errors import HopFailed
from ..targets.spawn import Spawned, tag_of


DECIDE_S = 10.0  # how long an interrupted start waits for the far side's decision


def run_call(argv, head, payload, on_event, timeout, on_data=None, held=False, late_body=None, outlive=False,
              decide=None, watch=None):
    """decide (a start's): a predicate of events; on Ctrl-C the call waits, DECIDE_S at most,
    for an event it holds (the launch), the reply or the far side's end, and the
    KeyboardInterrupt carries what came (`decision`: _await_decision). watch: a HopWatch
    (transport/diagnosis.py) that ends the call once its hop is found wedged."""
    seen: list[dict] = []
    if decide is not None:
        inner = on_event

        def on_event(ev):  # noqa: F811  (the caller's, and what decides)
            if decide(ev):
                seen.append(ev)
            if inner is not None:
                inner(ev)
    try:
        proc = Spawned(argv)
    except FileNotFoundError as e:
        raise HopFailed(f"cannot run {argv[0]!r} on this machine: {e.strerror}",
                        f"install {argv[0]} or put it on PATH", hop="local")
    writer = timer = None
    got = Replies(on_event, on_data)
    left = False
    try:  # until the reading below: a Ctrl-C or an error here ends the child too
        if watch is not None:
            watch.start(proc)
        if late_body is not None:  # the agent starts on what it has; the request follows (call's late)
            try:
                proc.stdin.write(head)
                proc.stdin.flush()
            except OSError:
                pass  # the far side went away (or refused the hash alone): its reply says which
            head = late_body()  # raising: ended below, before any request (the far side runs nothing)
        if payload is None:
            # The agent reads its whole input before it writes a byte, so a plain write cannot
            # deadlock here; a thread is only needed to stream a payload while we read. A hop
            # that never starts the agent never reads it either: the write blocks once the
            # pipe is full (a wedged `pct exec`), and a Ctrl-C there ends the child.
            _feed(proc.stdin, head, None, held)
            if held:
                _heartbeat(proc)
        else:
            import threading
            writer = threading.Thread(target=_feed, args=(proc.stdin, head, payload), daemon=True)
            writer.start()
        if timeout:
            import threading
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
    except BaseException:
        if timer is not None:
            timer.cancel()
        _give_up(proc, watch)
        raise
    try:
        for line in proc.stdout:
            proc.spoke = True
            got.take(line)
            if got.pending:
                got.pass_bytes(proc.stdout)
    except KeyboardInterrupt as ki:
        if decide is not None:
            ki.decision = _await_decision(proc, got, seen)
        if not outlive:
            try:
                if watch is not None:
                    watch.await_tag(proc)  # the hop's tag, in flight at a Ctrl-C soon after the start
            finally:
                proc.kill()
            raise
        left = True  # the far side goes on (a stop's KILL after the grace): left to it
        proc.leave()
        raise
    except BaseException:  # a caller's handler failing (its reader gone: `logs -f | head`)
        proc.kill()
        raise
    finally:
        if watch is not None:
            watch.cancel()
        rc = None if left else proc.wait()
        if proc.killed and not left:
            proc.await_death()  # the CLI may exit next: what the kill ended is dead first
        if timer:
            timer.cancel()
        if watch is not None and proc.killed and not left:
            watch.end_far(proc.hop_tag())  # given up here: its hop's command on the host too
        stderr = b"" if left else proc.stderr_bytes()
    if writer is not None:
        writer.join(timeout=5)
    return rc, got.garbage, got.reply, _untagged(stderr.decode("utf-8", "replace"))


def _give_up(proc: "Spawned", watch) -> None:
    """End the child (its group) before the call's reading began, with its hop command on
    the ssh host (the watch's end_far), and reap it."""
    try:
        if watch is not None:
            watch.cancel()
            watch.await_tag(proc)
    finally:
        proc.kill()
    proc.wait()
    proc.await_death()
    if watch is not None:
        watch.end_far(proc.hop_tag())
    proc.stderr_bytes()


def _untagged(text: str) -> str:
    """stderr without the tag line a tagged ssh hop's shell writes first (targets/ssh.py)."""
    if not text.startswith("runward-hop "):
        return text
    first, _, rest = text.partition("\n")
    return rest if tag_of(first.encode()) is not None else text


def _await_decision(proc: "Spawned", got: "Replies", seen: list[dict]) -> dict:
    """Ctrl-C came while a start's far side had not said whether it launched the job: the far
    agent goes on without us (its own session; an ssh session's command gets no hangup), so
    what the target does is read, not guessed. Lines are read on for DECIDE_S at most, until
    the launch event ({"event": ev}), the reply ({"reply": ...}) or the far side's end
    ({"ended": True}); {"waited": DECIDE_S} when none came in time, {"gave_up": True} on a
    second Ctrl-C, {"lost": exit status} when the link ended, not the agent: all unknown."""
    if seen or got.reply is not None:
        return {"event": seen[0]} if seen else {"reply": got.reply}
    fired: list[bool] = []
    timer = None
    try:  # from its first line: a second Ctrl-C at any moment of the wait is "gave up", never lost
        import threading
        timer = threading.Timer(DECIDE_S, lambda: (fired.append(True), proc.kill()))
        try:
            sys.stderr.write(f"runward: Ctrl-C: waiting up to {DECIDE_S:g}s for the target to say whether it "
                             "launched the job (Ctrl-C again to stop waiting)\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # the terminal is gone (SIGHUP): the wait goes on without its word
        timer.start()
        for line in proc.stdout:
            got.take(line)
            if got.pending:
                got.pass_bytes(proc.stdout)
            if seen or got.reply is not None:
                break
    except KeyboardInterrupt:
        return {"gave_up": True}
    except (OSError, ValueError):
        pass  # the pipe went with the far side: its end, below
    finally:
        if timer is not None:
            timer.cancel()
    if seen or got.reply is not None:
        return {"event": seen[0]} if seen else {"reply": got.reply}
    if fired:
        return {"waited": DECIDE_S}
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        return {"gave_up": True}
    # EOF is our child's end, not always the far agent's: ssh's own failure (255) or a client
    # killed by a signal (a link that dropped, a killed ssh or podman client) leaves the far
    # agent going on without us; only an exit status the agent gave says it ended
    return {"lost": rc} if rc == 255 or rc < 0 else {"ended": True}


class Replies:
    """What an agent writes, line by line: its events handed on as they come, its one reply
    kept, and the first lines that are not its JSON (the diagnosis shows them)."""

    def __init__(self, on_event: Callable[[dict], None] | None, on_data: Callable[[bytes], None] | None = None):
        self.on_event, self.on_data = on_event, on_data
        self.reply: dict | None = None
        self.garbage: list[bytes] = []
        self.events = False
        self.pending = 0  # raw bytes that follow the last line (its event was {"data": N})

    def pass_bytes(self, stream) -> None:
        """The pending raw bytes from stream to on_data, 1 MiB at most at a time."""
        left, self.pending = self.pending, 0
        while left:
            chunk = stream.read(min(left, 1 << 20))
            if not chunk:
                return  # the far side ended mid-frame: its missing reply is diagnosed
            left -= len(chunk)
            self.on_data(chunk)

    def take(self, line: bytes) -> None:
        msg = _parse_line(line)
        if msg is None:
            if len(self.garbage) < 20:
                self.garbage.append(line)
        elif "event" in msg:
            ev = msg["event"]
            if isinstance(ev, dict) and "notice" in ev:
                # what the far side says while the call waits (a run lock held by another
                # verb): for the person, on stderr, whatever the call's own events are
                sys.stderr.write(f"runward: {ev['notice']}\n")
                sys.stderr.flush()
                return
            self.events = True
            if self.on_data is not None and isinstance(ev, dict) and isinstance(ev.get("data"), int) and len(ev) == 1:
                self.pending = ev["data"]
                return
            if self.on_event is not None:
                self.on_event(ev)
        else:
            self.reply = msg


def agent_missing(reply: dict | None) -> bool:
    """The far side does not have this agent version (it ran nothing)."""
    return (reply is not None and not reply.get("ok")
            and (reply.get("error") or {}).get("type") == "AgentMissing")


def _feed(stdin, head: bytes, payload: Iterable[bytes] | None, held: bool = False) -> None:
    """Write the call's input; close it unless held (a follower's: closed by wait(), or by
    the kernel when this process dies, which is the far side's sign that nobody follows)."""
    try:
        stdin.write(head)
        if payload is not None:
            for chunk in payload:
                stdin.write(chunk)
        if held:
            stdin.flush()
        else:
            stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the far side went away; the reader side diagnoses why


HEARTBEAT_S = 1.0  # a held call's heartbeat on the agent's stdin: a byte this often


def _heartbeat(proc: "Spawned", every: float = HEARTBEAT_S) -> None:
    """A byte on a held call's stdin every EVERY seconds until the call ends: the far side
    reads them as the caller being there, and ends its follower once they stop (a link that
    dropped without closing anything; wire.caller_gone)."""
    import threading

    def beat() -> None:
        while proc.returncode is None:
            time.sleep(every)
            try:
                proc.stdin.write(b"\n")
                proc.stdin.flush()
            except (OSError, ValueError):  # the far side went away, or wait() closed it
                return
    threading.Thread(target=beat, daemon=True).start()


def _parse_line(line: bytes) -> dict | None:
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) and ("event" in msg or ("ok" in msg and "v" in msg)) else None
