"""How each tool picks processes: pgrep/pkill (-f or by name), killall, `ps ... | grep`.

A Query is the tool's selection, read from its own options; `selects` answers whether it
would pick a given process. `lister_at` and `kill_consumer` find the pipelines that list
processes and the `xargs kill` or `while read p; do kill $p` that turn a list into a kill.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .lexer import Word
from .parse import Script, basename, getopt_permuted, unwrap
from .processes import Proc, first_signal, kill_signal, signal_number, take_signal_spec
from .regex import compile_posix


def ps_line(cmdline: str) -> str:
    # ps shows control characters in arguments as blanks; grep then reads one line.
    return re.sub(r"[\x00-\x1f\x7f]", " ", cmdline)


@dataclass(frozen=True)
class Stage:
    """One filter: a regex list (any may match), maybe inverted (grep -v, pgrep -v)."""

    regexes: tuple[re.Pattern, ...]
    invert: bool = False

    def keeps(self, subject: str) -> bool:
        return any(r.search(subject) for r in self.regexes) != self.invert


@dataclass(frozen=True)
class Query:
    """How a tool picks processes: pgrep/pkill -f, pkill by name, killall, ps | grep."""

    tool: str  # pkill, pgrep, killall, ps|grep
    pattern: str  # as written, for messages
    word: Word | None  # the pattern word (to suggest the bracket trick)
    subject: str  # cmdline (pgrep -f), comm (pgrep), name (killall), psline (ps | grep)
    stages: tuple[Stage, ...]
    ignores_ancestors: bool = False  # pgrep/pkill -A (procps-ng >= 4.0.2)
    exact_names: tuple[str, ...] = ()  # killall NAME without -r

    def selects(self, proc: Proc) -> bool:
        if self.exact_names:
            return any(n == proc.name or n[:15] == proc.comm for n in self.exact_names)
        if self.subject == "cmdline":
            subject = proc.cmdline or proc.comm  # kernel threads have no cmdline
        elif self.subject == "psline":
            subject = ps_line(proc.cmdline)
        else:
            subject = proc.comm if self.subject == "comm" else proc.name
        return all(stage.keeps(subject) for stage in self.stages)


PASSTHROUGH = {"awk", "cut", "sed", "tr", "head", "tail", "sort", "uniq", "grep", "egrep",
               "fgrep"}


PGREP_WITH_ARG = {"-d", "--delimiter", "-g", "--pgroup", "-G", "--group", "-P", "--parent",
                  "-s", "--session", "-t", "--terminal", "-u", "--euid", "-U", "--uid", "-F",
                  "--pidfile", "-r", "--runstates", "-O", "--older", "-q", "--queue", "--ns",
                  "--nslist", "--cgroup", "--signal", "--env"}
KILLALL_WITH_ARG = {"-s", "--signal", "-u", "--user", "-o", "--older-than", "-y",
                    "--younger-than", "-n", "--ns", "-Z", "--context"}
GREP_WITH_ARG = {"-e", "--regexp", "-f", "--file", "-m", "--max-count", "-A", "-B", "-C",
                 "--after-context", "--before-context", "--context", "--label", "-d", "-D",
                 "--include", "--exclude", "--exclude-dir", "--binary-files", "--devices",
                 "--directories"}


def pgrep_query(words: list[Word]) -> tuple[Query | None, int | None]:
    """Parse pgrep/pkill options (procps-ng): the query, and for pkill the signal."""
    tool = basename(words[0].value)
    signal, args = take_signal_spec(words[1:]) if tool == "pkill" else (None, words[1:])
    opts, operands = getopt_permuted(args, PGREP_WITH_ARG)
    flags = {f for f, _ in opts}
    if tool == "pkill":
        signal = first_signal(signal_number(next((v for f, v in opts if f == "--signal"),
                                                 None)), signal, 15)
    if not operands or not operands[0].literal:
        return None, signal  # selects by -u/-P/... only, or a pattern known only at run time
    pattern = operands[0]
    regex = compile_posix(pattern.value, "ere", bool(flags & {"-i", "--ignore-case"}),
                          bool(flags & {"-x", "--exact"}))
    if regex is None:
        return None, signal  # pkill rejects an invalid regex and signals nothing
    full = bool(flags & {"-f", "--full"})
    query = Query(tool, pattern.value, pattern, "cmdline" if full else "comm",
                  (Stage((regex,), bool(flags & {"-v", "--inverse"})),),
                  ignores_ancestors=bool(flags & {"-A", "--ignore-ancestors"}))
    return query, signal


def killall_query(words: list[Word]) -> tuple[Query | None, int]:
    """Parse killall options (psmisc): the query, by exact name or -r regex, and the signal."""
    signal, args = take_signal_spec(words[1:])
    opts, operands = getopt_permuted(args, KILLALL_WITH_ARG)
    flags = {f for f, _ in opts}
    signal = first_signal(signal_number(next((v for f, v in opts
                                              if f in ("-s", "--signal")), None)),
                          signal, 15)
    if not operands or not all(w.literal for w in operands):
        return None, signal
    names = tuple(w.value for w in operands)
    if flags & {"-r", "--regexp"}:
        icase = bool(flags & {"-I", "--ignore-case"})
        regexes = tuple(r for r in (compile_posix(n, "ere", icase) for n in names) if r)
        if not regexes:
            return None, signal
        return Query("killall", " ".join(names), operands[0], "name", (Stage(regexes),)), signal
    return Query("killall", " ".join(names), operands[0], "name", (), exact_names=names), signal


def grep_stage(words: list[Word]) -> tuple[Stage, str, Word | None] | None:
    name = basename(words[0].value)
    opts, operands = getopt_permuted(words[1:], GREP_WITH_ARG)
    flags = {f for f, _ in opts}
    if flags & {"-f", "--file"}:
        return None
    mode = {"egrep": "grep-ere", "fgrep": "fixed"}.get(name, "grep-bre")
    for flag, flavour in (("-E", "grep-ere"), ("-F", "fixed"), ("-G", "grep-bre"),
                          ("-P", "perl"), ("--extended-regexp", "grep-ere"),
                          ("--fixed-strings", "fixed"), ("--basic-regexp", "grep-bre"),
                          ("--perl-regexp", "perl")):
        if flag in flags:
            mode = flavour
    patterns = [v for f, v in opts if f in ("-e", "--regexp") and v is not None]
    pattern_word = None
    if not patterns:
        if not operands or not operands[0].literal:
            return None
        pattern_word = operands[0]
        patterns = [pattern_word.value]
    icase = bool(flags & {"-i", "-y", "--ignore-case"})
    exact = bool(flags & {"-x", "--line-regexp"})
    word = bool(flags & {"-w", "--word-regexp"})
    regexes = tuple(compile_posix(p, mode, icase, exact, word) for p in patterns)
    if not regexes or any(r is None for r in regexes):
        return None
    invert = bool(flags & {"-v", "--invert-match"})
    return Stage(regexes, invert), " ".join(patterns), pattern_word


def lister_at(progs: list, i: int) -> tuple[Query, int] | None:
    """A process lister starting at pipeline stage i: pgrep P, or ps ... | grep P [| grep..]."""
    _, words = progs[i]
    if not words:
        return None
    name = basename(words[0].value)
    if name == "pgrep":
        query, _ = pgrep_query(words)
        return (query, i + 1) if query is not None else None
    if name != "ps":
        return None
    stages, texts, first_word = [], [], None
    j = i + 1
    while j < len(progs) and progs[j][1] and basename(progs[j][1][0].value) in (
            "grep", "egrep", "fgrep"):
        parsed = grep_stage(progs[j][1])
        if parsed is None:
            break
        stage, text, word = parsed
        stages.append(stage)
        if not stage.invert:
            texts.append(text)
            first_word = first_word or word
        j += 1
    if not stages or not texts:
        return None
    subject = "psline" if ps_shows_args(words[1:]) else "comm"
    return Query("ps|grep", " | ".join(texts), first_word, subject, tuple(stages)), j


def ps_shows_args(args: list[Word]) -> bool:
    """Does this ps print whole command lines (aux, -ef, -o args) or only names (-e, -A)?"""
    format_next = False
    for w in args:
        v = w.value
        if format_next or v.startswith("--format="):
            format_next = False
            if re.search(r"args|cmd|command", v):
                return True
            continue
        if not v.startswith("-"):
            return True  # BSD syntax: ps aux, ps ax, ps auxww print COMMAND with arguments
        letters = v.lstrip("-")
        if not v.startswith("--") and ("f" in letters or "F" in letters):
            return True
        format_next = v in ("--format", "-o", "-O") or (not v.startswith("--")
                                                          and letters[-1:] in ("o", "O"))
    return False


def kill_consumer(progs: list, j: int, script: Script | None,
                  idx: int) -> tuple[int, int] | None:
    """After a lister: `... | awk '{print $2}' | xargs kill -9`, or `| while read p; do kill
    $p; done`: (stage index, signal)."""
    while j < len(progs) and progs[j][1] and basename(progs[j][1][0].value) in PASSTHROUGH:
        j += 1
    if j >= len(progs) or not progs[j][1]:
        return None
    wrappers, words = progs[j]
    name = basename(words[0].value)
    if any(basename(w[0].value) == "xargs" for w in wrappers) and name == "kill":
        return j, kill_signal(words[1:])
    if name == "read" and script is not None and len(words) > 1:
        found = loop_kill(script, idx + 1, words[-1].value)
        if found is not None:
            return j, found[0]
    return None


def loop_kill(script: Script, start: int, var: str) -> tuple[int, list[Word]] | None:
    """A later `kill ... $var` in the same script: (its signal, its words)."""
    refs = {f"${var}", f"${{{var}}}"}
    for pipeline in script.pipelines[start:]:
        for command in pipeline.commands:
            _, words = unwrap(command.words)
            if words and basename(words[0].value) == "kill" and any(
                    w.value in refs for w in words[1:]):
                return kill_signal(words[1:]), words
    return None
