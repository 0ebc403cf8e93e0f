"""The agent's side of the wire: a JSON codec that costs no start-up, the reply line, and
the one error type that becomes a reply.

stdout of every call: zero or more {"event": ...} lines, then exactly one reply line,
{"v": 1, "ok": true, "result": {...}} or {"v": 1, "ok": false, "error": {...}}
(docs/protocol.md).
"""

import os
import time

_JSON = []


def _json_codec():
    """(loads, dumps) through json's own C accelerator, driven directly: json's Python layer
    imports re, and re imports enum, which together cost more than the rest of a status call.
    Checked once on a sample; where _json is missing or behaves otherwise, plain json, and
    where that is missing too (python3-minimal), minimal.py's."""
    if _JSON:
        return _JSON
    try:
        loads, dumps = _accelerated()
        sample = {"a": [1, -2.5, None, True, False, "x\u00e9\n\"", {"1": {}}], "b": 1e300}
        text = dumps(sample)
        if loads(text) != sample or text != (
                '{"a": [1, -2.5, null, true, false, "x\\u00e9\\n\\"", {"1": {}}], "b": 1e+300}'):
            raise ValueError("_json differs")
        _JSON[:] = [loads, dumps]
    except Exception:
        try:
            import json as json_
            _JSON[:] = [json_.loads, json_.dumps]
        except ImportError:  # python3-minimal has neither _json nor json
            from . import minimal
            _JSON[:] = [minimal.loads, minimal.dumps]
    return _JSON


def _accelerated():
    """loads and dumps made of _json's scanner and encoder, with json's defaults."""
    import _json

    class Ctx(object):
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                          "-Infinity": float("-inf")}.__getitem__

    scan = _json.make_scanner(Ctx())

    def loads(s):
        if isinstance(s, bytes):
            s = s.decode()
        t = s.strip(" \t\n\r")  # JSON's whitespace, and only that
        try:
            obj, end = scan(t, 0)
        except StopIteration:
            raise ValueError("not JSON: expecting a value at the start")
        except SystemError:
            # a syntax error: _json raises json.decoder.JSONDecodeError, which Python <= 3.11
            # takes from sys.modules only; where nothing imported json it set no exception and
            # the call says SystemError. Only this error path pays for json's import: its
            # JSONDecodeError (a ValueError) says where
            import json
            json.loads(t)
            raise ValueError("not JSON")
        if end != len(t):
            raise ValueError("not JSON: extra data at character %d" % end)
        return obj

    def default(o):
        raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)

    def dumps(obj, sort_keys=False):
        enc = _json.make_encoder({}, default, _json.encode_basestring_ascii, None,
                                 ": ", ", ", sort_keys, False, True)
        return "".join(enc(obj, 0))

    return loads, dumps


def json_pretty(obj):
    """json.dumps(obj, indent=1, sort_keys=True), as the records are written for people to
    read: the containers walked by minimal.py, each scalar written by the codec above. json's
    own indenting is its Python layer, whose re and enum cost every start and stop ~5 ms."""
    from . import minimal
    return minimal.dumps(obj, sort_keys=True, indent=1, scalar=json_dumps)


def json_loads(s):
    return _json_codec()[0](s)


def json_dumps(obj, sort_keys=False):
    """json.dumps(obj, sort_keys=sort_keys) with its defaults otherwise (ensure_ascii,
    ", " and ": ", NaN allowed)."""
    return _json_codec()[1](obj, sort_keys=sort_keys)


class AgentFailure(Exception):
    """An error that becomes the reply: type maps to one exit code on the CLI side."""

    def __init__(self, type_, message, hint=None, **details):
        Exception.__init__(self, message)
        self.type = type_
        self.message = message
        self.hint = hint
        self.details = details

    def to_dict(self):
        d = {"type": self.type, "message": self.message}
        if self.hint:
            d["hint"] = self.hint
        if self.details:
            d["details"] = self.details
        return d


def bad_input(message, hint=None, **details):
    return AgentFailure("BadInput", message, hint, **details)


_EVENTS = []  # where notice() and event() write an event line: set by main.serve for the call it serves


def set_events(fn):
    _EVENTS[:] = [fn] if fn is not None else []


def notice(text):
    """Say something to the person while the call waits (a run lock held by another verb):
    an {"event": {"notice": text}} line now, which the CLI prints on stderr for any op."""
    event({"notice": text})


def event(ev):
    """An {"event": ev} line now, for any op (start's {"started": ...}: what an interrupted
    CLI says is still running)."""
    if _EVENTS:
        _EVENTS[0](ev)


def outlive_caller():
    """For an op that must reach its verified end whatever happens to its caller (a stop: a
    KILL after the grace is still owed when the CLI is interrupted): from here on SIGINT,
    SIGHUP and SIGPIPE are ignored, the process leaves the caller's session and process group
    where it is still in them (an agent the CLI spawns has a session of its own already, which
    a terminal's Ctrl-C does not reach; an ssh session's command leads its own), and
    an event the caller is no longer there to read is dropped instead of ending the op. The
    op's end goes to the run's record for `status` to show."""
    try:
        import _signal as sig  # signal.py's enums cost every stop ~5 ms (proc/terminate.py)
    except ImportError:
        import signal as sig
    for s in (sig.SIGINT, sig.SIGHUP, sig.SIGPIPE):
        sig.signal(s, sig.SIG_IGN)
    try:
        os.setsid()
    except OSError:
        pass  # a group's leader already (a spawned agent, an ssh session's command)
    if _EVENTS:
        send = _EVENTS[0]

        def dropped_if_gone(ev):
            try:
                send(ev)
            except (OSError, ValueError):  # the reader is gone (EPIPE) or the pipe closed
                set_events(None)
        set_events(dropped_if_gone)


_CALLER = []  # (stdin fd or None, stdout fd) of the call main.serve serves
_GONE = []  # set by the heartbeat listener: the caller's stdin ended or went silent
_LISTENING = []  # the listener reads the caller's stdin (caller_gone then reads only _GONE)
EXIT_CALLER_GONE = 4  # the agent's status where the listener ended it (no reply: nobody reads)
# The listener's grace, after the heartbeat went silent, for a follower to see it and end
# on its own; one blocked writing to a link that no longer drains is ended then.
_SILENT_GRACE_S = 2.0


def set_caller(stdin_fd, stdout_fd, silent_s=None):
    """stdin_fd: where the caller holds its end open until the reply (a request with
    "stdin_held"), else None; stdout_fd: where the reply goes. silent_s: the caller sends a
    heartbeat on that stdin (a request with "heartbeat": {"every", "silent"}) and counts as
    gone once it has been silent that long: a link that dropped without a word closes
    nothing, and sshd holds the session (and this follower, blocked writing to it) until its
    TCP gives up, minutes later, or a returning link resets it."""
    _CALLER[:] = [(stdin_fd, stdout_fd)] if stdout_fd is not None else []
    del _GONE[:]
    _LISTENING[:] = [True] if stdin_fd is not None and silent_s is not None else []
    if _LISTENING:
        import threading
        threading.Thread(target=_listen, args=(stdin_fd, silent_s), daemon=True).start()


def _listen(fd, silent_s):
    """The heartbeat's reader, the only one of the caller's stdin: EOF or SILENT_S without a
    byte marks the caller gone; a follower still there _SILENT_GRACE_S later is blocked in
    a write that will never return, and this agent ends (its reply has nobody to reach)."""
    import select
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    heard = time.monotonic()
    while True:
        left = silent_s - (time.monotonic() - heard)
        if left <= 0:
            break
        if poll.poll(int(left * 1000) + 1):
            try:
                if not os.read(fd, 4096):
                    break
            except OSError:
                break
            heard = time.monotonic()
    _GONE.append(True)
    time.sleep(_SILENT_GRACE_S)
    os._exit(EXIT_CALLER_GONE)


def caller_gone(wait_s):
    """Wait up to wait_s seconds (0: just look); True as soon as whoever asked has gone: EOF
    on the stdin it holds open while it follows (Ctrl-C, a killed ssh or podman exec, a
    dropped link all close it, through every hop), its heartbeat silent (a link that dropped
    without a word: _listen), or nobody left reading stdout. A follower that only noticed a
    failed write would run forever inside a container: podman's conmon keeps reading the exec
    session's stdout after the client is gone."""
    if not _CALLER:
        time.sleep(wait_s)
        return False
    import select
    in_fd, out_fd = _CALLER[0]
    poll = select.poll()
    if in_fd is not None and not _LISTENING:
        poll.register(in_fd, select.POLLIN)
    poll.register(out_fd, 0)  # POLLERR and POLLHUP are always reported: the reader is gone
    deadline = time.monotonic() + wait_s
    step = 0.1 if _LISTENING else wait_s  # the listener's mark is looked at this often
    while True:
        if _GONE:
            return True
        left = max(0.0, min(step, deadline - time.monotonic()))
        for fd, ev in poll.poll(int(left * 1000)):
            if fd == out_fd or not ev & select.POLLIN or not os.read(in_fd, 4096):
                return True
            # bytes after the request mean nothing: read and dropped, the caller is there
        if time.monotonic() >= deadline:
            return bool(_GONE)


def reply(out, obj, extra=None):
    """Write one line: an event, or the reply (which carries extra, e.g. where the resident
    is, or that the agent could not be cached here)."""
    if extra and "ok" in obj:
        obj.update(extra)
    out.write((json_dumps(obj) + "\n").encode())
    out.flush()



def send_bytes(out, data):
    """Binary on stdout (pull): the event line {"event": {"data": N}}, then exactly N raw
    bytes. The CLI's reader takes the N bytes after that line as they are (transport.call's
    on_data), so any byte may travel; every other line stays one JSON document."""
    out.write(('{"event": {"data": %d}}\n' % len(data)).encode())
    out.write(data)
    out.flush()
