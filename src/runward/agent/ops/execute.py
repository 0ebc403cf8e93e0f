"""exec: run a command where the job lives and return a diagnosed result."""

import os
import time

from ..proc.terminate import signal, signal_name
from ..core.wire import bad_input
from .start import build_env, shell_argv

SHELL_NAMES = ("bash", "sh", "dash", "zsh")


def execute(req, home):
    """Run a command where the job lives; return code, signal, output, duration. The command
    is our child: if it kills its own shell (pkill -f matching it), we survive to say so."""
    import subprocess
    argv = req.get("argv")
    sh = req.get("sh")
    if sh is not None:
        argv = shell_argv(sh)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise bad_input("no command given", "runward exec --on TARGET -- COMMAND [ARG]...")
    cwd = os.path.expanduser(req.get("cwd") or "~")
    if not os.path.isdir(cwd):
        raise bad_input("working directory does not exist on the target: %s" % cwd, "pass an existing --cwd")
    env = build_env(req.get("env"))
    limit = int(req.get("max_output", 16 << 20))
    t0 = time.time()
    try:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise bad_input("command not found on the target: %s" % argv[0], "install it, or give an absolute path")
    except PermissionError:
        raise bad_input("command is not executable on the target: %s" % argv[0], "chmod +x it")
    out, err, timed_out = _communicate(p, req.get("timeout"))
    rc = p.returncode
    res = {"argv": argv, "sh": sh, "duration_s": round(time.time() - t0, 4), "timed_out": timed_out,
           "stdout": out[:limit].decode("utf-8", "replace"), "stderr": err[:limit].decode("utf-8", "replace"),
           "truncated": len(out) > limit or len(err) > limit}
    if rc < 0:
        res.update({"code": None, "signal": signal_name(-rc)})
    else:
        res.update({"code": rc, "signal": None})
    res["diagnosis"] = diagnose(res, sh is not None or os.path.basename(argv[0]) in SHELL_NAMES)
    return res


def _communicate(p, timeout):
    """(stdout, stderr, timed out); on a timeout the command's process group is killed."""
    import subprocess
    try:
        out, err = p.communicate(timeout=timeout)
        return out, err, False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        return out, err, True


def diagnose(res, is_shell):
    sig = res.get("signal")
    code = res.get("code")
    if res.get("timed_out"):
        return "timed out; the command's process group was killed"
    if sig is None and code is not None and code > 128 and code - 128 in (9, 15):
        sig = signal_name(code - 128)
    if sig in ("SIGKILL", "SIGTERM") and is_shell:
        return ("the shell was killed by %s: the command may have killed its own shell "
                "(pkill -f / pgrep -f | xargs kill match the shell's command line); "
                "use `runward kill PATTERN` or `runward stop NAME` instead" % sig)
    if sig:
        return "killed by %s" % sig
    if code == 127:
        return "command not found (exit 127)"
    if code == 126:
        return "found but not executable (exit 126)"
    return None
