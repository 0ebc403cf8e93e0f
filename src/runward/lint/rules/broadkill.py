"""Broad kills: a signal to every process the caller may signal, or to every process of a name.

kill-everything: `kill -9 -1` (pid -1, kill(2)) and `killall5` (SysV init's shutdown tool),
and `killall -u USER` / `pkill -u USER` with nothing else selecting (every process of USER).
kill-by-name: `killall NAME` (psmisc), every process so named, whoever's run it belongs to.
"""

from __future__ import annotations

from ..lexer import Word
from ..parse import Command, basename, getopt_permuted
from ..processes import HARMLESS_SIGNALS, Ctx, kill_signal, signal_number, take_signal_spec
from ..queries import KILLALL_WITH_ARG, PGREP_WITH_ARG, killall_query, pgrep_query
from ..report import command_text
from ..scan import Scan

WHY_EVERYTHING = (
    "kill(2) with pid -1 signals every process the caller may signal except init and itself; "
    "killall5 signals every process outside its own session (it is what SysV init runs at "
    "shutdown). As root that is the whole machine, or the whole container: sshd and the "
    "sessions in it, the shell running this line, every run and the agents watching them. As "
    "a user it is everything that user runs: the login session and the ssh connection this "
    "line came over, tmux, editors, and every other run. The connection drops, nothing after "
    "it runs, and no output says what happened. `killall -u USER` and `pkill -u USER` with no "
    "name signal every process of USER: as root, everything but the kernel's threads "
    "(docs/lint.md, `kill-everything`).")
WHY_BY_NAME = (
    "killall signals every process whose name is NAME, not the one job you mean: `killall "
    "python3` also ends every other run, notebook, data loader and tool written in Python that "
    "you may signal (as root, every user's), and the name says nothing about which run a "
    "process belongs to. On System V and Solaris, killall ignores its operands and kills every "
    "process (docs/lint.md, `kill-by-name`).")


def fix_for(ctx: Ctx) -> str:
    on = f" --on {ctx.target}" if ctx.target else ""
    return (f"`runward stop NAME` stops one run's whole process tree, found by its "
            f"RUNWARD_RUN marker (setsid escapees included), and verifies it dead; for a "
            f"process runward did not start, `runward kill 'PATTERN'{on}` lists what it would "
            f"signal, signals only with --yes, and refuses more than --max-procs matches.")


def where(ctx: Ctx) -> str:
    return ctx.where or "on this machine"


# pkill/pgrep options that narrow the selection below "every process of the user"
PGREP_NARROWING = {"-g", "--pgroup", "-G", "--group", "-P", "--parent", "-s", "--session",
                   "-t", "--terminal", "-F", "--pidfile", "-r", "--runstates", "-O", "--older",
                   "--ns", "--cgroup", "--env", "-n", "--newest", "-o", "--oldest", "-v",
                   "--inverse"}
PGREP_USER = {"-u", "--euid", "-U", "--uid"}
KILLALL_NARROWING = {"-o", "--older-than", "-y", "--younger-than", "-n", "--ns", "-Z",
                     "--context"}


def is_pid_minus_1(v: str) -> bool:
    """bash's kill reads the pid as a decimal number, whitespace and leading zeros allowed:
    `-01`, `-001` and ' -1' are all pid -1 (`bash -c 'kill -0 -01'` exits 0)."""
    v = v.strip()
    return v.startswith("-") and len(v) > 1 and v[1:].isdigit() and int(v[1:]) == 1


def user_wide(words: list[Word]) -> str | None:
    """The user(s) `killall -u U` / `pkill -u U` signals every process of, or None where a
    name, pattern or other option narrows the selection."""
    tool = basename(words[0].value)
    _, args = take_signal_spec(words[1:])
    with_arg, narrowing, users = ((KILLALL_WITH_ARG, KILLALL_NARROWING, {"-u", "--user"})
                                  if tool == "killall" else
                                  (PGREP_WITH_ARG, PGREP_NARROWING, PGREP_USER))
    opts, operands = getopt_permuted(args, with_arg)
    named = [v for f, v in opts if f in users and v]
    if operands or not named or any(f in narrowing for f, _ in opts):
        return None
    return ",".join(named)


def kill_all_pid(args: list[Word]) -> bool:
    """Does `kill ARGS` name pid -1? A first `-N` is the signal (`kill -1 -1` is HUP to -1)."""
    signal_seen = options_done = False
    skip = False
    for w in args:
        v = w.value
        if skip:
            skip = False
        elif not options_done and v == "--":
            options_done = True
        elif not options_done and v in ("-s", "-n", "--signal"):
            signal_seen = skip = True
        elif not options_done and v in ("-l", "-L", "--list", "--table"):
            return False
        elif (not options_done and not signal_seen and v.startswith("-") and len(v) > 1
              and signal_number(v[1:]) is not None):
            signal_seen = True
        else:
            options_done = True
            if is_pid_minus_1(v):
                return True
    return False


def check(scan: Scan, words: list[Word], command: Command, ctx: Ctx) -> None:
    """`kill SIG -1`, `killall5`, `killall NAME`: what they signal, beyond the job."""
    name = basename(words[0].value)
    text = command_text(words)
    if name == "kill":
        signal = kill_signal(words[1:])
        if signal in HARMLESS_SIGNALS or not kill_all_pid(words[1:]):
            return
        message = (f"`{text}` signals every process the caller may signal {where(ctx)} "
                   f"(pid -1), not one job")
        scan.add("kill-everything", command.span(), message, WHY_EVERYTHING, fix_for(ctx))
    elif name == "killall5":
        signal = kill_signal(words[1:])
        if signal in HARMLESS_SIGNALS:
            return
        message = (f"`{text}` signals every process outside its own session {where(ctx)}, "
                   f"not one job")
        scan.add("kill-everything", command.span(), message, WHY_EVERYTHING, fix_for(ctx))
    elif name in ("killall", "pkill") and (user := user_wide(words)) is not None:
        signal = (killall_query if name == "killall" else pgrep_query)(words)[1]
        if signal in HARMLESS_SIGNALS:
            return
        message = (f"`{text}` signals every process of user {user} {where(ctx)} "
                   f"(as root, everything), not one job")
        scan.add("kill-everything", command.span(), message, WHY_EVERYTHING, fix_for(ctx))
    elif name == "killall":
        query, signal = killall_query(words)
        if query is None or signal in HARMLESS_SIGNALS:
            return
        named = "named" if query.exact_names else "whose name matches"
        message = (f"`{text}` signals every process {named} {query.pattern!r} {where(ctx)}, "
                   f"whichever run it belongs to")
        scan.add("kill-by-name", command.span(), message, WHY_BY_NAME, fix_for(ctx))
