"""Notifications of a supervised run (exited, restarted, gave_up, every alert): to each of the
policy's notify entries, a command run here (argv split as a shell would, the event's JSON
on its stdin, killed after COMMAND_S) or a webhook (the same JSON POSTed with urllib: a
timeout per try, TRIES tries with a growing pause). Each send runs in a thread of its own:
supervision never waits for a slow hook. The shim waits for them, bounded, only as it ends
(threads are not daemons), so the last event (gave_up) is still delivered. What each send
came to is written to the shim's own log (attempts/N.shim.log), every URL's password masked.
A URL's user:password@ is sent as HTTP Basic auth, the URL itself sent without it (urllib
would take "user:password@host" for the host and fail every try)."""

import os
import sys
import threading

try:
    import _signal as _sig  # the C module: no enum import (proc/terminate.py says why)
except ImportError:
    import signal as _sig

# Popen one hook at a time: a fork while another thread of the shim is inside an import holds
# the import lock in the child too (see _hook_child)
_SPAWN = threading.Lock()

COMMAND_S = 30.0
HTTP_TIMEOUT_S = 5.0
TRIES = 3


def send(targets, event):
    from ..core.wire import json_dumps
    body = (json_dumps(event) + "\n").encode()
    for t in targets:
        fn = _post if t.startswith(("http://", "https://")) else _command
        th = threading.Thread(target=_guarded, args=(fn, t, body, event.get("event")))
        th.start()


def _guarded(fn, target, body, what):
    try:
        fn(target, body)
    except Exception as e:  # a hook's failure is logged, never the shim's end
        from ..core.secrets import mask_url_passwords
        _log(mask_url_passwords("notify %s to %s failed: %s: %s" % (what, target, type(e).__name__, e)))


def _log(msg):
    try:
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def basic_auth(url):
    """(the URL without its user info, the headers it asks for): Authorization: Basic for a
    URL with user[:password]@ (each percent-decoded, as RFC 3986 writes them)."""
    import base64
    from urllib.parse import unquote, urlsplit, urlunsplit
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    headers = {"Content-Type": "application/json", "User-Agent": "runward"}
    if not at:
        return url, headers
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(("%s:%s" % (unquote(user), unquote(password))).encode("utf-8")).decode("ascii")
    headers["Authorization"] = "Basic " + token
    return urlunsplit(parts._replace(netloc=hostport)), headers


def _post(url, body):
    import time
    import urllib.request
    last = None
    url, headers = basic_auth(url)
    for i in range(TRIES):
        req = urllib.request.Request(url, data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as r:
                if 200 <= r.status < 300:
                    return
                last = "HTTP %d" % r.status
        except Exception as e:  # refused, timed out, HTTP 5xx: tried again
            last = "%s: %s" % (type(e).__name__, e)
        time.sleep(0.5 * 2 ** i)
    raise RuntimeError("%d tries, last: %s" % (TRIES, last))


def _hook_child():
    """Runs in the forked child before its exec: nothing here may import or take a lock
    another thread held at the fork. It imported signal, and two hooks started at once (a
    run's exited and restarted events) left the second child deadlocked on the import lock:
    the hook never ran and nothing said so."""
    _sig.pthread_sigmask(_sig.SIG_SETMASK, ())
    os.setpgid(0, 0)


def _command(cmd, body):
    import shlex
    import signal
    import subprocess
    argv = shlex.split(cmd)
    # its output goes to the shim's log (our stderr), never to the status pipe (our stdout);
    # a group of its own (killed whole at the timeout) but the shim's session: a child of the
    # shim outside that session is one the shim adopted, a member of the run (runs.adopted)
    with _SPAWN:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=2, stderr=2, close_fds=True,
                             preexec_fn=_hook_child)
    try:
        p.communicate(body, timeout=COMMAND_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise RuntimeError("still running after %gs: killed" % COMMAND_S)
    if p.returncode:
        raise RuntimeError("exit status %s" % p.returncode)
