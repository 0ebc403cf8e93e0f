"""Which signal names a target takes: the rule of agent/proc/terminate.parse_signal (a number 1-64,
or a Linux signal's name, with or without SIG, any case), checked on this side so a bad one is
refused before anything is looked up or stopped. The table is Linux's (signal(7)): a target is
Linux whatever the CLI runs on, so the CLI's own `signal` module (macOS names) is not it."""

from __future__ import annotations

# Linux's numbers (signal(7), x86 and arm): a name and its number are one signal to compare
NUMBERS = dict(zip("HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CONT "
                   "STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS".split(), range(1, 32)))
NUMBERS.update(IOT=6, CLD=17, POLL=29, RTMIN=34, RTMAX=64)
LINUX_SIGNALS = frozenset(NUMBERS)

HINT = "use a name such as TERM, INT, KILL, USR1, or a number from 1 to 64"


def known(sig) -> bool:
    s = str(sig).strip().upper()
    if s.isdigit():
        return 0 < int(s) < 65
    return s.removeprefix("SIG") in LINUX_SIGNALS


def normalized(sig):
    """The signal's number ("TERM", "SIGTERM", "term" and "15" are all 15); a value that names
    no known signal as it is."""
    s = str(sig).strip().upper()
    if s.isdigit():
        return int(s) if 0 < int(s) < 65 else sig
    return NUMBERS.get(s.removeprefix("SIG"), sig)
