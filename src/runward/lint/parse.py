"""Shell syntax above words: pipelines of simple commands, their options, their wrappers.

`parse` groups the lexer's tokens as a shell would run them; `getopt` reads a command's
options as its getopt(3) does; `unwrap` sees through env, nohup, sudo, timeout and the other
programs that run a command given as their arguments, and says which of them stay alive
around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .lexer import REDIRECTIONS, Lexer, Op, Source, Word


@dataclass
class Command:
    words: list[Word]
    assigns: list[Word] = field(default_factory=list)
    redirs: list[tuple[str, Word]] = field(default_factory=list)
    skipped: list[Word] = field(default_factory=list)  # for/case headers: not run as a command
    expanded: bool = False  # built from words an outer shell already expanded (an exec argv)

    def all_words(self) -> list[Word]:
        return self.assigns + self.words + [w for _, w in self.redirs] + self.skipped

    def span(self) -> tuple[int, int]:
        words = self.all_words()
        if not words:
            return 0, 0
        return min(w.start for w in words), max(w.end for w in words)


@dataclass
class Pipeline:
    commands: list[Command]
    sep: str | None  # the operator that ended it: ; & && || newline, or None at the end
    negated: bool = False
    timed: bool = False  # `time CMD`: bash stays to report the time, so it never execs CMD

    @property
    def background(self) -> bool:
        return self.sep == "&"

    def span(self) -> tuple[int, int]:
        spans = [c.span() for c in self.commands]
        return min(s for s, _ in spans), max(e for _, e in spans)


@dataclass
class Script:
    pipelines: list[Pipeline]
    compound: bool  # if/while/for/case/subshells/groups: shells do not exec inside those


PREFIX_KEYWORDS = {"!", "{", "}", "then", "do", "else", "elif", "if", "while", "until",
                   "time", "fi", "done", "esac"}
HEADER_KEYWORDS = {"for", "select", "case", "function"}
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")


def parse(src: Source) -> Script:
    builder = ScriptBuilder()
    for tok in Lexer(src).tokens():
        builder.feed(tok)
    return builder.finish()


class ScriptBuilder:
    """Groups tokens into pipelines of simple commands; compound syntax is flattened."""

    def __init__(self) -> None:
        self.pipelines: list[Pipeline] = []
        self.commands: list[Command] = []
        self.words: list[Word] = []
        self.redirs: list[tuple[str, Word]] = []
        self.pending_redir: str | None = None
        self.compound = False
        self.negated = False
        self.timed = False
        self.parens = 0

    def feed(self, tok: Word | Op) -> None:
        if isinstance(tok, Word):
            if self.pending_redir:
                self.redirs.append((self.pending_redir, tok))
                self.pending_redir = None
            elif not tok.io_number:
                self.words.append(tok)
            return
        op = tok.op
        if op in REDIRECTIONS:
            self.pending_redir = op
        elif op in ("|", "|&"):
            self._end_command()
        elif op == "(":
            self.compound = True
            if self.words:
                self.words = []  # `name ()`: a function definition header
            else:
                self.parens += 1
        elif op == ")":
            self.compound = True
            if self.parens:
                self.parens -= 1
                self._end_command()
            else:
                self.words = []  # a case pattern `start)`
        else:
            self._end_pipeline(op)

    def finish(self) -> Script:
        self._end_pipeline(None)
        return Script(self.pipelines, self.compound)

    def _end_command(self) -> None:
        if self.words or self.redirs:
            self.commands.append(self._split_command(self.words, self.redirs))
        self.words, self.redirs, self.pending_redir = [], [], None

    def _end_pipeline(self, sep: str | None) -> None:
        self._end_command()
        if self.commands:
            self.pipelines.append(Pipeline(self.commands, sep, self.negated, self.timed))
        elif sep == "&" and self.pipelines:
            self.pipelines[-1].sep = "&"  # `( ... ) &`
        self.commands, self.negated, self.timed = [], False, False

    def _split_command(self, words: list[Word], redirs: list[tuple[str, Word]]) -> Command:
        i = 0
        while i < len(words) and not words[i].quoted and words[i].value in PREFIX_KEYWORDS:
            if words[i].value == "!":
                self.negated = True
            elif words[i].value == "time":
                self.timed = True
            else:
                self.compound = True
            i += 1 + (words[i].value == "time" and i + 1 < len(words)
                      and words[i + 1].value == "-p")
        if i < len(words) and not words[i].quoted and words[i].value in HEADER_KEYWORDS:
            self.compound = True
            return Command([], redirs=redirs, skipped=words[i:])
        assigns = []
        while i < len(words) and ASSIGNMENT.match(words[i].value) and not words[i].quoted:
            assigns.append(words[i])
            i += 1
        return Command(words[i:], assigns, redirs)


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] if path.strip("/") else path


def getopt(words: list[Word], with_arg: set[str]) -> tuple[list[tuple[str, str | None]], int]:
    """getopt-style: options up to the first operand. Returns (options, operand index)."""
    opts: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        v = words[i].value
        if v == "--":
            return opts, i + 1
        if len(v) < 2 or v[0] != "-":
            return opts, i
        i += parse_option(words, i, with_arg, opts)
    return opts, i


def getopt_permuted(words: list[Word], with_arg: set[str]) -> tuple[list, list[Word]]:
    """GNU getopt_long, which permutes: options may follow operands (`pkill train.py -f`)."""
    opts: list[tuple[str, str | None]] = []
    operands: list[Word] = []
    i = 0
    while i < len(words):
        v = words[i].value
        if v == "--":
            operands.extend(words[i + 1:])
            break
        if len(v) < 2 or v[0] != "-":
            operands.append(words[i])
            i += 1
            continue
        i += parse_option(words, i, with_arg, opts)
    return opts, operands


def parse_option(words: list[Word], i: int, with_arg: set[str], opts: list) -> int:
    """Record the option(s) in words[i]; return how many words they used."""
    v = words[i].value
    if v.startswith("--"):
        name, eq, val = v.partition("=")
        if eq:
            opts.append((name, val))
        elif name in with_arg and i + 1 < len(words):
            opts.append((name, words[i + 1].value))
            return 2
        else:
            opts.append((name, None))
        return 1
    for k in range(1, len(v)):
        flag = "-" + v[k]
        if flag in with_arg:
            attached = v[k + 1:]
            if attached:
                opts.append((flag, attached))
                return 1
            if i + 1 < len(words):
                opts.append((flag, words[i + 1].value))
                return 2
            opts.append((flag, None))
            return 1
        opts.append((flag, None))
    return 1


# These exec the command in their own place: no process of theirs stays around it.
TRANSPARENT = {
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
    "nohup": set(), "nice": {"-n", "--adjustment"}, "ionice": {"-c", "-n", "-p", "--class",
                                                               "--classdata"},
    "stdbuf": {"-i", "-o", "-e", "--input", "--output", "--error"}, "setsid": set(),
    "exec": {"-a"}, "command": set(), "builtin": set(), "chrt": set(), "taskset": set(),
    "numactl": {"-C", "-N", "-m", "-p", "-i", "-P"}, "ulimit": set(),
}
TRANSPARENT_POSITIONAL = {"chrt": 1, "taskset": 1}
# These fork the command and wait for it: their own process, with its argv, stays around it.
PERSISTENT = {
    "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "-R", "--user",
             "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type",
             "--other-user", "--command-timeout", "--chroot"},
    "doas": {"-u", "-C"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"},
    "xargs": {"-I", "-n", "-L", "-P", "-d", "-E", "-s", "-a", "--max-args", "--max-lines",
              "--max-procs", "--delimiter", "--eof", "--max-chars", "--arg-file",
              "--replace", "--process-slot-var"},
    "time": {"-f", "-o", "--format", "--output"},
    "sshpass": {"-p", "-f", "-d", "-P"},
    "flock": {"-w", "-E", "--timeout", "--conflict-exit-code"},
}
PERSISTENT_POSITIONAL = {"timeout": 1, "flock": 1}
CATCHES_SIGNALS = {"sudo", "doas", "timeout"}  # they catch and relay TERM, INT, HUP ...


def unwrap(words: list[Word]) -> tuple[list[list[Word]], list[Word]]:
    """Strip env/nohup/sudo/timeout...: (argvs of wrappers that stay alive, the command)."""
    persistent: list[list[Word]] = []
    for _ in range(16):
        if not words:
            break
        name = basename(words[0].value)
        table = TRANSPARENT.get(name, PERSISTENT.get(name))
        if table is None or not words[0].literal:
            break
        if name in PERSISTENT:
            persistent.append(words)
        _, k = getopt(words[1:], table)
        k += 1
        if name == "env":
            while k < len(words) and ASSIGNMENT.match(words[k].value):
                k += 1
        if name == "sudo":
            while k < len(words) and ASSIGNMENT.match(words[k].value):
                k += 1
        k += TRANSPARENT_POSITIONAL.get(name, 0) + PERSISTENT_POSITIONAL.get(name, 0)
        words = words[k:]
    return persistent, words


def argv_of(words: list[Word]) -> tuple[str, ...]:
    return tuple(w.value for w in words)


def join_words(words: list[Word]) -> Source:
    """The string ssh (or eval, or watch) builds by joining words with single spaces."""
    chars: list[str] = []
    pos: list[int] = []
    opaque: list[tuple[int, int]] = []
    for k, w in enumerate(words):
        if k:
            chars.append(" ")
            pos.append(pos[-1] if pos else w.start)
        base = len(chars)
        chars.extend(w.value)
        pos.extend(w.pos)
        opaque.extend((base + a, base + b) for a, b in w.expanded)
    return Source("".join(chars), tuple(pos), tuple(opaque))
