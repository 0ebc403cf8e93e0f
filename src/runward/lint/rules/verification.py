"""Verification: a job started, restarted or waited for with nothing that verifies it.

kill-then-start: one line kills a program and starts it again (docs/from-shell.md, "Stop, then start again").
unverified-nohup: a background launch with no check after it (failures 4 and 5).
sleep-as-verification: a fixed sleep, then one look (failure 5).
"""

from __future__ import annotations

import re

from ..lexer import Word
from ..parse import Command, Pipeline, Script, argv_of, basename, unwrap
from ..processes import Ctx, Proc, sees
from ..report import command_text, display_argv
from ..scan import Launch, Scan, StartEvent

# Programs that are not "the job": running them does not start what a kill pattern is for.
UTILITIES = {
    "echo", "printf", "true", "false", ":", "cd", "pwd", "ls", "cat", "tail", "head", "less",
    "more", "grep", "egrep", "fgrep", "rg", "sed", "awk", "cut", "sort", "uniq", "wc", "tee",
    "tr", "test", "[", "[[", "sleep", "wait", "kill", "pkill", "pgrep", "killall", "pidof",
    "ps", "nvidia-smi", "rm", "mv", "cp", "scp", "rsync", "mkdir", "rmdir", "touch", "chmod",
    "chown", "ln", "date", "which", "type", "export", "set", "unset", "source", ".", "exit",
    "return", "read", "jobs", "disown", "trap", "df", "du", "free", "top", "htop", "uptime",
    "hostname", "whoami", "id", "env", "runward", "systemctl", "journalctl", "git", "curl",
    "wget", "find", "stat", "file", "readlink", "realpath", "basename", "dirname", "xargs",
    "sync", "lsof", "ss", "netstat", "ip", "ping", "tar", "gzip", "unzip", "mount", "umount",
    "shift", "local", "declare", "alias", "history", "clear", "yes", "seq", "diff", "md5sum",
    "sha256sum", "docker", "podman", "pct", "lxc", "lxc-attach", "kubectl", "ssh", "screen",
    "tmux", "pip", "pip3", "apt", "apt-get", "conda", "watch", "eval", "su", "sudo",
}
# Commands that look at whether a job is running or what it wrote.
CHECKS = {"pgrep", "pidof", "ps", "tail", "head", "cat", "less", "grep", "nvidia-smi",
          "jobs", "wait", "runward", "journalctl", "lsof", "ss", "netstat", "curl", "test",
          "[", "[["}
SLEEP_CHECKS = CHECKS - {"wait", "jobs", "runward", "test", "[", "[["}


DURATION = re.compile(r"\d+(\.\d+)?[smhd]?|\.\d+[smhd]?")


WHY_KILL_THEN_START = (
    "One shell line that kills and starts the same program races with itself: pkill returns "
    "once the signal is sent, not once the old run has exited (it may still hold GPUs and "
    "ports while it checkpoints), and a pattern that matches the new run or the shell that "
    "starts it takes the start with it. A stop verified dead and a start verified alive are "
    "separate steps (docs/from-shell.md, \"Stop, then start again, in one ssh call\").")
FIX_KILL_THEN_START = (
    "do them as separate calls: `runward stop NAME` (verified dead, GPUs released), then "
    "`runward start NAME -- COMMAND` (verified alive); or `runward restart NAME`, which "
    "stops, verifies, deploys, verifies, starts and verifies as separate steps.")


WHY_NOHUP = (
    "A background launch returns at once, whatever happens to the job: a typo, a missing "
    "file, a CUDA OOM in the first second all look exactly like success, and `no output` "
    "cannot be told from `never started` (docs/from-shell.md, \"Is it running? Did it "
    "crash? With what code?\").")
FIX_NOHUP = (
    "`runward start NAME -- COMMAND` launches it detached, watches it for a settle period and "
    "reports an early exit at once with its exit code and last log lines; short of that, "
    "follow the launch with a check of the pid and the log.")
WHY_SLEEP = (
    "A fixed sleep is a guess: too short and the job has not failed yet (or the GPUs are "
    "not freed yet), too long and it wastes time; one look after it only proves the job was "
    "alive at that instant (docs/from-shell.md, \"A fixed sleep as verification\").")
FIX_SLEEP = (
    "`runward start NAME -- COMMAND` verifies the job alive after a settle period and "
    "reports an early exit at once; `runward stop NAME` waits until it is verified dead and "
    "its GPUs are released; `runward watch NAME` follows health and exits non-zero on an "
    "alert.")


def is_check(words: list[Word], names: set[str] = CHECKS) -> bool:
    name = basename(words[0].value)
    args = argv_of(words[1:])
    if name == "kill":
        return "-0" in args or ("-s" in args and "0" in args)
    if name == "systemctl":
        return bool(args) and args[0] in ("status", "is-active")
    return name in names


def sleep_before_check(scan: Scan, script: Script, idx: int) -> None:
    """`sleep 5` alone, then a check such as `tail log` or `pgrep`."""
    pipeline = script.pipelines[idx]
    if len(pipeline.commands) != 1 or pipeline.background or idx + 1 >= len(
            script.pipelines):
        return
    _, words = unwrap(pipeline.commands[0].words)
    if (len(words) < 2 or basename(words[0].value) != "sleep"
            or not all(DURATION.fullmatch(w.value) for w in words[1:])):
        return
    following = script.pipelines[idx + 1].commands[0]
    _, after = unwrap(following.words)
    if after and is_check(after, SLEEP_CHECKS):
        sleep_text, check_text = command_text(words), command_text(after)
        message = (f"`{sleep_text}` then `{check_text}`: a fixed sleep stands in for "
                   f"verification")
        scan.add("sleep-as-verification", pipeline.commands[0].span(), message,
                 WHY_SLEEP, FIX_SLEEP)


def record_launch(scan: Scan, pipeline: Pipeline, ctx: Ctx) -> None:
    """A pipeline sent to the background (`nohup python train.py &`)."""
    _, words = unwrap(pipeline.commands[-1].words)
    if not words or basename(words[0].value) in ("sleep", "wait", "true", ":"):
        return
    text = " | ".join(command_text(c.words) for c in pipeline.commands) + " &"
    scan.launches.append(Launch(scan.seq, ctx.domain, pipeline.span(), text))


def record_program(scan: Scan, words: list[Word], command: Command, ctx: Ctx) -> None:
    """A program run: a check (it looks at a job or its log), or the start of a job."""
    name = basename(words[0].value)
    if is_check(words):
        scan.checks.append((scan.seq, ctx.domain))
    elif name not in UTILITIES and words[0].value:
        proc = Proc(argv_of(words), ctx.domain, ctx.level, "started", ctx.where)
        scan.starts.append(StartEvent(proc, ctx.domain, command_text(command.words)))


def finish(scan: Scan) -> None:
    """The rules that need the whole line: kill-then-start, unverified-nohup."""
    for kill in scan.kills:
        start = next((s for s in scan.starts if sees(kill.domain, s.domain)
                      and kill.query.selects(s.proc)), None)
        if start is not None:
            message = (f"`{kill.text}` and `{start.text}` kill and start the same program "
                       f"in one shell invocation: pattern {kill.query.pattern!r} matches "
                       f"the command line `{display_argv(start.proc.argv)}`")
            scan.add("kill-then-start", kill.span, message, WHY_KILL_THEN_START,
                     FIX_KILL_THEN_START)
    for launch in scan.launches:
        if not any(seq > launch.seq and sees(domain, launch.domain)
                   for seq, domain in scan.checks):
            message = (f"`{launch.text}` starts a job in the background and nothing after "
                       f"it checks that it started")
            scan.add("unverified-nohup", launch.span, message, WHY_NOHUP, FIX_NOHUP)

