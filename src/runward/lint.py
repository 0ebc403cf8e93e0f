"""Shell-command hazard checks behind `runward lint`.

The failure this module exists for (docs/from-shell.md, "Stop, then start again"): `pkill -f PATTERN` matches
PATTERN against the whole command line of every process (/proc/PID/cmdline, NULs read as
spaces) and skips only its own pid. Inside `bash -c '...'`, `ssh HOST '...'` (sshd runs the
login shell with -c and the joined words) or `pct exec ID -- bash -lc '...'`, the shell that
runs the line carries the whole line, pattern included, in its own argv, so pkill signals it
too: everything after pkill silently never runs, and `|| true` cannot help.

`lint()` splits the command line as a POSIX shell does, follows the strings nested in ssh,
`bash -c`, `pct exec`, `docker exec`, `sudo` and friends, and keeps, at every nesting level,
the command line of each process that encloses the command (as the kernel shows it). Each
pattern is then evaluated as pkill/pgrep/grep evaluate it (POSIX regular expressions,
unanchored search) against those command lines.

Assumptions, each also stated where it is used and in docs/lint.md:

- The top-level command runs inside `bash -c '<command>'`, as an agent tool or a script runs
  it. Such a shell wraps the command in its own, so it never execs it away and stays alive.
  `lint(command, assume_shell=False)` models a command typed at an interactive prompt.
- sshd runs the remote user's login shell, taken to be bash, as `bash -c '<joined words>'`.
- bash, zsh and ksh exec the only command of a `-c` string (bash >= 5.1 also the last one)
  when it has no redirections, so that shell is gone before pkill looks. `sh` is taken to be
  dash (Debian, Ubuntu), which does not.
- A container hop (pct, lxc-attach, lxc, docker, podman, kubectl exec) has its own PID
  namespace and its own filesystem.
- Words built from `$VAR` or `$(...)` have unknown values: patterns made of them are not
  evaluated.

Pure and standard-library only: nothing is run and nothing is read from disk.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property, lru_cache

__all__ = ["Finding", "RULES", "format_findings", "lint"]


# --------------------------------------------------------------------------- findings


@dataclass(frozen=True)
class Finding:
    """One hazard: which rule, how bad, where in the command string, and what to do."""

    rule: str
    severity: str  # "error" | "warning" | "info"
    start: int  # span in the top-level command string
    end: int
    message: str
    why: str
    fix: str

    def to_dict(self) -> dict:
        return asdict(self)


#: rule id -> severity. docs/lint.md explains each one.
RULES = {
    "self-kill": "error",
    "self-kill-fragile": "warning",
    "self-match-list": "warning",
    "kill-then-start": "warning",
    "host-path-in-container": "warning",
    "parse-error": "warning",
    "unverified-nohup": "info",
    "sleep-as-verification": "info",
}

_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}


def lint(command: str, *, assume_shell: bool = True) -> list[Finding]:
    """Return the hazards found in a shell command line, in order of position.

    assume_shell=True (the default) treats the command as run by `bash -c '<command>'`, as an
    agent tool, a script or ssh would run it; that shell's command line then contains every
    pattern typed in the command. Use assume_shell=False for a command typed at an
    interactive prompt. Never raises on odd input: quoting a shell cannot parse yields one
    "parse-error" warning.
    """
    if isinstance(command, (bytes, bytearray)):
        command = bytes(command).decode("utf-8", "replace")
    elif not isinstance(command, str):
        command = str(command)
    return _Linter(command, assume_shell).run()


def format_findings(command: str, findings: list[Finding]) -> str:
    """Human-readable report: one block per finding, with a caret line under its span."""
    if not findings:
        return "no findings"
    blocks = [_format_one(command, f) for f in findings]
    counts = {sev: sum(f.severity == sev for f in findings) for sev in _SEVERITY_RANK}
    summary = ", ".join(f"{n} {sev}{'s' if n != 1 and sev != 'info' else ''}"
                        for sev, n in counts.items() if n)
    return "\n\n".join(blocks) + f"\n\n{summary}"


def _format_one(command: str, f: Finding) -> str:
    line, caret = _caret_lines(command, f.start, f.end)
    return "\n".join([
        f"{f.severity}[{f.rule}] at {f.start}-{f.end}: {f.message}",
        f"  {line}",
        f"  {caret}",
        f"  why: {f.why}",
        f"  fix: {f.fix}",
    ])


def _caret_lines(command: str, start: int, end: int, width: int = 100) -> tuple[str, str]:
    """The line of `command` holding `start`, windowed to `width`, and carets under the span."""
    start = max(0, min(start, len(command)))
    line_start = command.rfind("\n", 0, start) + 1
    line_end = command.find("\n", start)
    line_end = len(command) if line_end < 0 else line_end
    end = max(start + 1, min(end, line_end))
    left = max(line_start, start - 30) if line_end - line_start > width else line_start
    right = min(line_end, left + width)
    prefix = "..." if left > line_start else ""
    suffix = "..." if right < line_end else ""
    text = re.sub(r"[\x00-\x1f\x7f]", " ", command[left:right])
    carets = " " * (len(prefix) + start - left) + "^" * max(1, min(end, right) - start)
    return prefix + text + suffix, carets


# --------------------------------------------------------------------------- source text


@dataclass(frozen=True)
class _Source:
    """Shell source text, with the offset in the top-level command of each of its chars.

    Nested strings (the argument of `bash -c`, the words ssh joins) are _Sources too, so every
    span found at any depth maps back to the characters the user typed. `opaque` marks
    expansions ($VAR, $(...)) that an outer shell already expanded: their text here is a
    stand-in for a value nobody knows yet, not code to run again.
    """

    text: str
    pos: tuple[int, ...]
    opaque: tuple[tuple[int, int], ...] = ()

    def span(self, start: int, end: int) -> tuple[int, int]:
        if not self.pos:
            return 0, 0
        last = len(self.pos) - 1
        first = self.pos[min(max(start, 0), last)]
        if end <= start:
            return first, first
        return first, self.pos[min(end - 1, last)] + 1


@dataclass
class _Word:
    """A shell word after quote removal; expansions stay as their source text."""

    value: str
    pos: tuple[int, ...]  # top-level offset of each char of value
    start: int  # top-level span of the token as written
    end: int
    literal: bool = True  # no $expansion or `substitution` is left in value
    quoted: bool = False
    subs: list[_Source] = field(default_factory=list)  # $(...) and `...` bodies
    expanded: tuple[tuple[int, int], ...] = ()  # value ranges this shell expands
    io_number: bool = False  # the 2 of 2>&1

    def source(self) -> _Source:
        return _Source(self.value, self.pos, self.expanded)


@dataclass
class _Op:
    op: str
    start: int
    end: int


class _ParseError(ValueError):
    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


# --------------------------------------------------------------------------- lexer

_OPERATORS = ("&>>", "<<<", "<<-", ";;&", "&&", "||", ";;", ";&", "|&", ">>", "<<", "<&",
              ">&", "<>", ">|", "&>", ";", "&", "|", "(", ")", "<", ">")
_REDIRECTIONS = {"<", ">", ">>", "<<", "<<-", "<<<", "<&", ">&", "<>", ">|", "&>", "&>>"}
_WORD_BREAK = frozenset(" \t\n;&|()<>")
_PARAMETER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")
_ANSI_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b",
                "E": "\x1b", "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


class _WordBuilder:
    __slots__ = ("chars", "where", "literal", "quoted", "subs", "expanded")

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.where: list[int] = []
        self.literal = True
        self.quoted = False
        self.subs: list[_Source] = []
        self.expanded: list[tuple[int, int]] = []

    def add(self, text: str, at: int) -> None:
        for k, ch in enumerate(text):
            self.chars.append(ch)
            self.where.append(at + k)

    def add_decoded(self, ch: str, at: int) -> None:
        self.chars.append(ch)
        self.where.append(at)

    def add_expansion(self, raw: str, at: int) -> None:
        begin = len(self.chars)
        self.add(raw, at)
        self.expanded.append((begin, len(self.chars)))
        self.literal = False


class _Lexer:
    """POSIX shell token recognition (XCU 2.3): words and operators, with quote removal."""

    def __init__(self, src: _Source):
        self.src = src
        self.s = src.text
        self.n = len(src.text)
        self.i = 0
        self.opaque = dict(src.opaque)
        self.heredocs: list[tuple[str, bool]] = []
        self.want_delimiter: bool | None = None

    def tokens(self) -> list[_Word | _Op]:
        out: list[_Word | _Op] = []
        while (tok := self._next()) is not None:
            out.append(tok)
        return out

    def _next(self) -> _Word | _Op | None:
        self._skip_blanks_and_comments()
        if self.i >= self.n:
            return None
        s, c = self.s, self.s[self.i]
        if c == "\n":
            tok = self._op("\n")
            self._skip_heredoc_bodies()
            return tok
        if c in "<>" and s.startswith("(", self.i + 1):
            return self._word()  # process substitution <(...) >(...)
        for op in _OPERATORS if c in ";&|()<>" else ():
            if s.startswith(op, self.i):
                if op in ("<<", "<<-"):
                    self.want_delimiter = op == "<<-"
                return self._op(op)
        word = self._word()
        if self.want_delimiter is not None:
            self.heredocs.append((word.value, self.want_delimiter))
            self.want_delimiter = None
        if word.value.isdigit() and not word.quoted and s[self.i:self.i + 1] in ("<", ">"):
            word.io_number = True
        return word

    def _skip_blanks_and_comments(self) -> None:
        s = self.s
        while self.i < self.n:
            c = s[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and s.startswith("\\\n", self.i):
                self.i += 2
            elif c == "#":
                nl = s.find("\n", self.i)
                self.i = self.n if nl < 0 else nl
            else:
                return

    def _op(self, op: str) -> _Op:
        start, end = self.src.span(self.i, self.i + len(op))
        self.i += len(op)
        return _Op(op, start, end)

    def _skip_heredoc_bodies(self) -> None:
        # Here-document bodies start after the newline that ends their command (XCU 2.7.4).
        while self.heredocs:
            delimiter, strip_tabs = self.heredocs.pop(0)
            while self.i < self.n:
                nl = self.s.find("\n", self.i)
                line = self.s[self.i:self.n if nl < 0 else nl]
                self.i = self.n if nl < 0 else nl + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break

    def _word(self) -> _Word:
        b = _WordBuilder()
        start = self.i
        if self.s[self.i] in "<>":
            self._paren_substitution(b, self.i + 1, self.i)
        while self.i < self.n and self.s[self.i] not in _WORD_BREAK:
            c = self.s[self.i]
            if c == "\\":
                self._backslash(b)
            elif c == "'":
                self._single_quoted(b)
            elif c == '"':
                self._double_quoted(b)
            elif c == "$":
                self._dollar(b, in_double=False)
            elif c == "`":
                self._backquoted(b)
            else:
                b.add(c, self.i)
                self.i += 1
        top_start, top_end = self.src.span(start, self.i)
        pos = tuple(self.src.pos[k] for k in b.where)
        return _Word("".join(b.chars), pos, top_start, top_end, b.literal, b.quoted, b.subs,
                     tuple(b.expanded))

    def _backslash(self, b: _WordBuilder) -> None:
        i = self.i
        if i + 1 >= self.n:
            b.add("\\", i)
            self.i += 1
        elif self.s[i + 1] == "\n":
            self.i += 2  # line continuation
        else:
            b.quoted = True
            b.add(self.s[i + 1], i + 1)
            self.i += 2

    def _single_quoted(self, b: _WordBuilder) -> None:
        close = self.s.find("'", self.i + 1)
        if close < 0:
            raise _ParseError("unterminated single quote", self.i)
        b.quoted = True
        b.add(self.s[self.i + 1:close], self.i + 1)
        self.i = close + 1

    def _double_quoted(self, b: _WordBuilder) -> None:
        opening, s = self.i, self.s
        b.quoted = True
        self.i += 1
        while self.i < self.n:
            c = s[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and self.i + 1 < self.n and s[self.i + 1] in '$`"\\\n':
                if s[self.i + 1] != "\n":
                    b.add(s[self.i + 1], self.i + 1)
                self.i += 2
            elif c == "$":
                self._dollar(b, in_double=True)
            elif c == "`":
                self._backquoted(b)
            else:
                b.add(c, self.i)
                self.i += 1
        raise _ParseError("unterminated double quote", opening)

    def _dollar(self, b: _WordBuilder, in_double: bool) -> None:
        s, i = self.s, self.i
        if i in self.opaque:
            b.add_expansion(s[i:self.opaque[i]], i)
            self.i = self.opaque[i]
            return
        nxt = s[i + 1:i + 2]
        if nxt == "'" and not in_double:
            self._ansi_c_quoted(b)
        elif nxt == '"' and not in_double:
            self.i += 1  # $"..." is a translatable "..."
            self._double_quoted(b)
        elif s.startswith("$((", i) or nxt == "{":
            close = _find_close(s, i + 1)
            if close < 0:
                raise _ParseError("unterminated $(( or ${", i)
            b.add_expansion(s[i:close + 1], i)
            self.i = close + 1
        elif nxt == "(":
            self._paren_substitution(b, i + 1, i)
        elif m := _PARAMETER.match(s, i + 1):
            b.add_expansion(s[i:m.end()], i)
            self.i = m.end()
        else:
            b.add("$", i)
            self.i += 1

    def _paren_substitution(self, b: _WordBuilder, open_at: int, raw_from: int) -> None:
        close = _find_close(self.s, open_at)
        if close < 0:
            raise _ParseError("unterminated command substitution", raw_from)
        body = range(open_at + 1, close)
        b.subs.append(_Source(self.s[open_at + 1:close], tuple(self.src.pos[k] for k in body)))
        b.add_expansion(self.s[raw_from:close + 1], raw_from)
        self.i = close + 1

    def _backquoted(self, b: _WordBuilder) -> None:
        s, i = self.s, self.i
        if i in self.opaque:
            b.add_expansion(s[i:self.opaque[i]], i)
            self.i = self.opaque[i]
            return
        chars: list[str] = []
        where: list[int] = []
        j = i + 1
        while j < self.n and s[j] != "`":
            if s[j] == "\\" and j + 1 < self.n and s[j + 1] in "$`\\":
                j += 1
            chars.append(s[j])
            where.append(j)
            j += 1
        if j >= self.n:
            raise _ParseError("unterminated backquote", i)
        b.subs.append(_Source("".join(chars), tuple(self.src.pos[k] for k in where)))
        b.add_expansion(s[i:j + 1], i)
        self.i = j + 1

    def _ansi_c_quoted(self, b: _WordBuilder) -> None:
        s, opening = self.s, self.i
        b.quoted = True
        j = opening + 2
        while j < self.n:
            if s[j] == "'":
                self.i = j + 1
                return
            if s[j] == "\\" and j + 1 < self.n:
                text, length = _ansi_escape(s, j)
                for ch in text:
                    b.add_decoded(ch, j)
                j += length
            else:
                b.add(s[j], j)
                j += 1
        raise _ParseError("unterminated $'...' string", opening)


def _ansi_escape(s: str, j: int) -> tuple[str, int]:
    """Decode the bash $'...' escape at s[j] (a backslash): (text, chars consumed)."""
    e = s[j + 1]
    if e in _ANSI_SIMPLE:
        return _ANSI_SIMPLE[e], 2
    for lead, digits, base in (("x", 2, 16), ("u", 4, 16), ("U", 8, 16)):
        if e == lead:
            m = re.match(r"[0-9A-Fa-f]{1,%d}" % digits, s[j + 2:])
            if m:
                return chr(min(int(m.group(), base), 0x10FFFF)), 2 + m.end()
    if e in "01234567":
        m = re.match(r"[0-7]{1,3}", s[j + 1:])
        return chr(int(m.group(), 8) & 0xFF), 1 + m.end()
    if e == "c" and j + 2 < len(s):
        return chr(ord(s[j + 2]) & 0x1F), 3
    return "\\" + e, 2


def _find_close(s: str, i: int) -> int:
    """Index of the bracket closing s[i] ('(' or '{'), skipping quotes and nested expansions.

    Iterative (an explicit stack) so that no input can exhaust Python's recursion limit.
    """
    closer = {"(": ")", "{": "}"}
    stack = [closer[s[i]]]
    j, n = i + 1, len(s)
    while j < n:
        c, top = s[j], stack[-1]
        nxt = s[j + 1:j + 2]
        if top == '"':
            if c == "\\":
                j += 2
            elif c == '"':
                stack.pop()
                j += 1
            elif c == "$" and nxt in ("(", "{") and nxt:
                stack.append(closer[nxt])
                j += 2
            elif c == "`":
                j = _skip_backquote(s, j)
            else:
                j += 1
            continue
        if c == "\\":
            j += 2
        elif c == "'":
            k = s.find("'", j + 1)
            if k < 0:
                return -1
            j = k + 1
        elif c == "$" and nxt == "'":
            j = _skip_ansi_c(s, j)
        elif c == '"':
            stack.append('"')
            j += 1
        elif c == "`":
            j = _skip_backquote(s, j)
        elif c == "$" and nxt in ("(", "{") and nxt:
            stack.append(closer[nxt])
            j += 2
        elif c in "({" and closer[c] == top:
            stack.append(top)
            j += 1
        elif c == top:
            stack.pop()
            if not stack:
                return j
            j += 1
        else:
            j += 1
    return -1


def _skip_backquote(s: str, j: int) -> int:
    k = j + 1
    while k < len(s) and s[k] != "`":
        k += 2 if s[k] == "\\" else 1
    return k + 1 if k < len(s) else len(s)


def _skip_ansi_c(s: str, j: int) -> int:
    k = j + 2
    while k < len(s) and s[k] != "'":
        k += 2 if s[k] == "\\" else 1
    return k + 1 if k < len(s) else len(s)


# --------------------------------------------------------------------------- parser


@dataclass
class _Command:
    words: list[_Word]
    assigns: list[_Word] = field(default_factory=list)
    redirs: list[tuple[str, _Word]] = field(default_factory=list)
    skipped: list[_Word] = field(default_factory=list)  # for/case headers: not run as a command
    expanded: bool = False  # built from words an outer shell already expanded (an exec argv)

    def all_words(self) -> list[_Word]:
        return self.assigns + self.words + [w for _, w in self.redirs] + self.skipped

    def span(self) -> tuple[int, int]:
        words = self.all_words()
        if not words:
            return 0, 0
        return min(w.start for w in words), max(w.end for w in words)


@dataclass
class _Pipeline:
    commands: list[_Command]
    sep: str | None  # the operator that ended it: ; & && || newline, or None at the end
    negated: bool = False

    @property
    def background(self) -> bool:
        return self.sep == "&"

    def span(self) -> tuple[int, int]:
        spans = [c.span() for c in self.commands]
        return min(s for s, _ in spans), max(e for _, e in spans)


@dataclass
class _Script:
    pipelines: list[_Pipeline]
    compound: bool  # if/while/for/case/subshells/groups: shells do not exec inside those


_PREFIX_KEYWORDS = {"!", "{", "}", "then", "do", "else", "elif", "if", "while", "until",
                    "time", "fi", "done", "esac"}
_HEADER_KEYWORDS = {"for", "select", "case", "function"}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")


def _parse(src: _Source) -> _Script:
    builder = _ScriptBuilder()
    for tok in _Lexer(src).tokens():
        builder.feed(tok)
    return builder.finish()


class _ScriptBuilder:
    """Groups tokens into pipelines of simple commands; compound syntax is flattened."""

    def __init__(self) -> None:
        self.pipelines: list[_Pipeline] = []
        self.commands: list[_Command] = []
        self.words: list[_Word] = []
        self.redirs: list[tuple[str, _Word]] = []
        self.pending_redir: str | None = None
        self.compound = False
        self.negated = False
        self.parens = 0

    def feed(self, tok: _Word | _Op) -> None:
        if isinstance(tok, _Word):
            if self.pending_redir:
                self.redirs.append((self.pending_redir, tok))
                self.pending_redir = None
            elif not tok.io_number:
                self.words.append(tok)
            return
        op = tok.op
        if op in _REDIRECTIONS:
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

    def finish(self) -> _Script:
        self._end_pipeline(None)
        return _Script(self.pipelines, self.compound)

    def _end_command(self) -> None:
        if self.words or self.redirs:
            self.commands.append(self._split_command(self.words, self.redirs))
        self.words, self.redirs, self.pending_redir = [], [], None

    def _end_pipeline(self, sep: str | None) -> None:
        self._end_command()
        if self.commands:
            self.pipelines.append(_Pipeline(self.commands, sep, self.negated))
        elif sep == "&" and self.pipelines:
            self.pipelines[-1].sep = "&"  # `( ... ) &`
        self.commands, self.negated = [], False

    def _split_command(self, words: list[_Word], redirs: list[tuple[str, _Word]]) -> _Command:
        i = 0
        while i < len(words) and not words[i].quoted and words[i].value in _PREFIX_KEYWORDS:
            if words[i].value == "!":
                self.negated = True
            elif words[i].value != "time":
                self.compound = True
            i += 1 + (words[i].value == "time" and i + 1 < len(words)
                      and words[i + 1].value == "-p")
        if i < len(words) and not words[i].quoted and words[i].value in _HEADER_KEYWORDS:
            self.compound = True
            return _Command([], redirs=redirs, skipped=words[i:])
        assigns = []
        while i < len(words) and _ASSIGNMENT.match(words[i].value) and not words[i].quoted:
            assigns.append(words[i])
            i += 1
        return _Command(words[i:], assigns, redirs)


# --------------------------------------------------------------------------- POSIX regex


_CLASS_TEXT = {
    "alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
    "space": " \\t\\n\\r\\f\\v", "blank": " \\t", "xdigit": "0-9A-Fa-f",
    "punct": "!-/:-@\\[-`{-~",
    "print": "\\x20-\\x7e", "graph": "\\x21-\\x7e", "cntrl": "\\x00-\\x1f\\x7f",
}
_INTERVAL = re.compile(r"\{(\d*)(,?)(\d*)\}")


@lru_cache(maxsize=512)
def _compile_posix(pattern: str, mode: str = "ere", icase: bool = False, exact: bool = False,
                   word: bool = False) -> re.Pattern | None:
    """Compile a pattern as the tool would, into an equivalent Python regex.

    mode: "ere" is regcomp(3) with REG_EXTENDED, as pgrep, pkill and killall -r use it;
    "grep-ere" is grep -E, "grep-bre" plain grep (GNU basic syntax), "fixed" grep -F,
    "perl" grep -P (approximated by Python's re). None when the pattern is invalid there:
    the tool then fails and signals nothing.
    """
    try:
        if mode == "fixed":
            body = "|".join(re.escape(p) for p in pattern.split("\n"))
        elif mode == "perl":
            body = pattern
        else:
            body = _translate_posix(pattern, mode)
        if word:
            body = rf"(?<!\w)(?:{body})(?!\w)"
        if exact:
            body = rf"\A(?:{body})\Z"
        # No REG_NEWLINE: '.' matches a newline and ^/$ anchor only the whole string.
        return re.compile(body, re.DOTALL | (re.IGNORECASE if icase else 0))
    except (re.error, ValueError, OverflowError, RecursionError):
        return None


def _translate_posix(p: str, mode: str) -> str:
    """POSIX ERE/BRE to Python re syntax; ValueError where the tool rejects the pattern.

    The flavours differ at the edges (checked against pgrep and GNU grep 3.8): regcomp
    rejects a leading `*` and a `{` that opens no interval, grep -E ignores the `*` and
    reads the `{` literally, and in a basic regex both are literal.
    """
    basic = mode == "grep-bre"
    strict = mode == "ere"
    leading = "literal" if basic else "error" if strict else "drop"
    return _build_regex(_regex_tokens(p, basic, strict), leading)


def _regex_tokens(p: str, basic: bool, strict: bool) -> list[tuple[str, str]]:
    """(kind, text) tokens: lit, atom, anchor, quant, open, close, alt."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("trailing backslash")
            out.append(_regex_escape(p[i + 1], basic))
            i += 2
            if out[-1][0] == "quant" and out[-1][1] == "{":  # BRE \{m,n\}
                m = re.compile(r"(\d*)(,?)(\d*)\\\}").match(p, i)
                if not m:
                    raise ValueError("bad interval")
                out[-1] = ("quant", _interval_text(m.group(1), m.group(2), m.group(3)))
                i = m.end()
        elif c == "[":
            text, i = _bracket_expression(p, i)
            out.append(("atom", text))
        elif c == ".":
            out.append(("atom", "."))
            i += 1
        elif c == "^":
            at_start = not out or out[-1][0] in ("open", "alt")
            out.append(("anchor", "^") if (not basic or at_start) else ("lit", "^"))
            i += 1
        elif c == "$":
            rest = p[i + 1:]
            at_end = rest == "" or rest.startswith(("\\)", "\\|"))
            out.append(("anchor", r"\Z") if (not basic or at_end) else ("lit", "$"))
            i += 1
        elif c == "*":
            out.append(("quant", "*"))
            i += 1
        elif not basic and c in "+?":
            out.append(("quant", c))
            i += 1
        elif not basic and c == "{":
            m = _INTERVAL.match(p, i)
            if m and (m.group(1) or m.group(3)):
                out.append(("quant", _interval_text(m.group(1), m.group(2), m.group(3))))
                i = m.end()
            elif strict:
                raise ValueError("unmatched {")
            else:
                out.append(("lit", "{"))
                i += 1
        elif not basic and c in "()|":
            out.append({"(": ("open", ""), ")": ("close", ""), "|": ("alt", "")}[c])
            i += 1
        else:
            out.append(("lit", c))
            i += 1
    return out


def _regex_escape(e: str, basic: bool) -> tuple[str, str]:
    """Meaning of a backslash-escaped char in a POSIX regex (with the GNU extensions)."""
    if basic and e in "(){|+?":
        return {"(": ("open", ""), ")": ("close", ""), "|": ("alt", ""), "{": ("quant", "{"),
                "+": ("quant", "+"), "?": ("quant", "?")}[e]
    if e in "wWsS":
        return "atom", "\\" + e
    if e in "bB":
        return "anchor", "\\" + e
    if e == "<":
        return "anchor", r"\b(?=\w)"
    if e == ">":
        return "anchor", r"\b(?<=\w)"
    if e == "`":
        return "anchor", r"\A"
    if e == "'":
        return "anchor", r"\Z"
    if e in "123456789":
        return "atom", "\\" + e
    return "lit", e


def _interval_text(low: str, comma: str, high: str) -> str:
    if low and high and int(low) > int(high):
        raise ValueError("invalid interval")
    return "{" + (low or "0") + comma + high + "}"


def _bracket_expression(p: str, i: int) -> tuple[str, int]:
    """Translate the bracket expression opening at p[i]; return (python class, next index).

    In POSIX brackets a backslash is an ordinary char, ']' first is literal, and
    [:digit:] [=a=] [.-.] are classes, equivalence classes and collating symbols.
    """
    j, n = i + 1, len(p)
    negate = j < n and p[j] == "^"
    j += negate
    items: list[str] = []
    first = True
    while True:
        if j >= n:
            raise ValueError("unterminated [")
        c = p[j]
        if c == "]" and not first:
            break
        first = False
        if c == "[" and p[j + 1:j + 2] in (":", "=", "."):
            kind = p[j + 1]
            close = p.find(kind + "]", j + 2)
            if close < 0:
                raise ValueError("unterminated [" + kind)
            name = p[j + 2:close]
            if kind == ":":
                if name not in _CLASS_TEXT:
                    raise ValueError("unknown class")
                items.append(_CLASS_TEXT[name])
            else:
                items.extend(_class_char(ch) for ch in name)
            j = close + 2
            continue
        if p[j + 1:j + 2] == "-" and j + 2 < n and p[j + 2] != "]":
            low, high = c, p[j + 2]
            if low > high:
                raise ValueError("invalid range")
            items.append(_class_char(low) + "-" + _class_char(high))
            j += 3
            continue
        items.append(_class_char(c))
        j += 1
    return "[" + ("^" if negate else "") + "".join(items) + "]", j + 1


def _class_char(ch: str) -> str:
    return "\\" + ch if ch in "\\]^-[&~|" else ch


def _build_regex(tokens: list[tuple[str, str]], leading: str) -> str:
    """Assemble tokens; a quantifier on a quantified atom wraps it (ERE `a**`, not possessive).

    leading: what a quantifier with nothing to repeat means: "error", "drop" or "literal".
    """
    groups: list[list[list[list]]] = [[[]]]  # group -> alternatives -> [text, quantified]
    for kind, text in tokens:
        alt = groups[-1][-1]
        if kind == "lit":
            alt.append([re.escape(text), False])
        elif kind == "atom":
            alt.append([text, False])
        elif kind == "anchor":
            alt.append([text, None])  # None: nothing to repeat
        elif kind == "quant":
            if not alt or alt[-1][1] is None:
                if leading == "error":
                    raise ValueError("nothing to repeat")
                if leading == "literal":
                    alt.append([re.escape(text), False])
                elif alt and text.startswith(("*", "?", "{0")):
                    alt.pop()  # grep -E: `^*` repeats the anchor zero times, so drops it
            else:
                if alt[-1][1]:
                    alt[-1][0] = "(?:" + alt[-1][0] + ")"
                alt[-1][0] += text
                alt[-1][1] = True
        elif kind == "open":
            groups.append([[]])
        elif kind == "close":
            if len(groups) == 1:
                alt.append([re.escape(")"), False])
            else:
                inner = groups.pop()
                groups[-1][-1].append(["(" + _join_alternatives(inner) + ")", False])
        elif kind == "alt":
            groups[-1].append([])
    if len(groups) > 1:
        raise ValueError("unmatched (")
    return _join_alternatives(groups[0])


def _join_alternatives(alternatives: list[list[list]]) -> str:
    return "|".join("".join(atom[0] for atom in alt) for alt in alternatives)


def _bracket_trick(pattern: str) -> str | None:
    """`train.py` -> `[t]rain.py`: same matches, but the text no longer matches itself."""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
        elif c == "[":
            try:
                i = _bracket_expression(pattern, i)[1]
            except ValueError:
                return None
        elif c in "^$.*+?(){}|":
            i += 1
        else:
            return pattern[:i] + "[" + c + "]" + pattern[i + 1:]
    return None


# --------------------------------------------------------------------------- processes


_SIGNALS = {"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "IOT": 6, "BUS": 7,
            "FPE": 8, "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14,
            "TERM": 15, "STKFLT": 16, "CHLD": 17, "CLD": 17, "CONT": 18, "STOP": 19,
            "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24, "XFSZ": 25,
            "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29, "POLL": 29, "PWR": 30, "SYS": 31}
_SIGNAL_NAMES = {num: name for name, num in reversed(list(_SIGNALS.items()))}
# Signals whose default action does nothing to a shell (0 only tests for existence).
_HARMLESS_SIGNALS = {0, 17, 18, 23, 28}
_UNCATCHABLE = {9, 19}
_EXEC_SHELLS = {"bash", "zsh", "ksh", "ksh93", "mksh"}
_SHELLS = _EXEC_SHELLS | {"sh", "dash", "ash"}
_CONTAINER_KINDS = {"pct", "lxc", "docker", "podman", "kubectl"}
_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]", "ip6-localhost"}


@dataclass(frozen=True)
class _Proc:
    """A process alive around a command, with its argv as /proc/PID/cmdline shows it."""

    argv: tuple[str, ...]
    domain: tuple  # the machine and PID namespace it lives in
    level: int
    role: str  # agent | interactive | shell | sshd-shell | wrapper | client | sibling
    where: str = ""
    family: str = ""  # for shells: bash, zsh, sh, ...
    state: str = "alive"  # alive | exec-lone | exec-last | exec: replaced by the command
    catches: bool = False  # catches ordinary signals (sudo, doas, timeout relay them)

    @cached_property
    def cmdline(self) -> str:
        return " ".join(self.argv)

    @cached_property
    def name(self) -> str:
        return _basename(self.argv[0]) if self.argv else ""

    @cached_property
    def comm(self) -> str:
        # The kernel's comm: basename of the executed file, cut to 15 chars (TASK_COMM_LEN).
        return self.name.lstrip("-")[:15]


@dataclass(frozen=True)
class _Ctx:
    """Where a command runs: the processes around it, its machine, its nesting level."""

    enclosing: tuple[_Proc, ...] = ()
    domain: tuple = ()
    where: str = ""  # "" is this machine; "on root@host", "inside pct exec 200 on root@host"
    target: str | None = ""  # the runward --on spelling of the domain; None if there is none
    level: int = 0
    runner: int = -1  # index in enclosing of the shell reading the current script
    depth: int = 0

    def with_runner_state(self, state: str) -> _Ctx:
        if self.runner < 0:
            return self
        procs = list(self.enclosing)
        procs[self.runner] = replace(procs[self.runner], state=state)
        return replace(self, enclosing=tuple(procs))

    def push(self, *procs: _Proc, **changes) -> _Ctx:
        return replace(self, enclosing=self.enclosing + procs, depth=self.depth + 1, **changes)


def _sees(viewer: tuple, target: tuple) -> bool:
    """Can a process in `viewer` see one in `target`? Hosts see into their containers."""
    if target[:len(viewer)] != viewer:
        return False
    return all(kind in _CONTAINER_KINDS for kind, _ in target[len(viewer):])


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] if path.strip("/") else path


def _ps_line(cmdline: str) -> str:
    # ps shows control characters in arguments as blanks; grep then reads one line.
    return re.sub(r"[\x00-\x1f\x7f]", " ", cmdline)


@dataclass(frozen=True)
class _Stage:
    """One filter: a regex list (any may match), maybe inverted (grep -v, pgrep -v)."""

    regexes: tuple[re.Pattern, ...]
    invert: bool = False

    def keeps(self, subject: str) -> bool:
        return any(r.search(subject) for r in self.regexes) != self.invert


@dataclass(frozen=True)
class _Query:
    """How a tool picks processes: pgrep/pkill -f, pkill by name, killall, ps | grep."""

    tool: str  # pkill, pgrep, killall, ps|grep
    pattern: str  # as written, for messages
    word: _Word | None  # the pattern word (to suggest the bracket trick)
    subject: str  # cmdline (pgrep -f), comm (pgrep), name (killall), psline (ps | grep)
    stages: tuple[_Stage, ...]
    ignores_ancestors: bool = False  # pgrep/pkill -A (procps-ng >= 4.0.2)
    exact_names: tuple[str, ...] = ()  # killall NAME without -r

    def selects(self, proc: _Proc) -> bool:
        if self.exact_names:
            return any(n == proc.name or n[:15] == proc.comm for n in self.exact_names)
        if self.subject == "cmdline":
            subject = proc.cmdline or proc.comm  # kernel threads have no cmdline
        elif self.subject == "psline":
            subject = _ps_line(proc.cmdline)
        else:
            subject = proc.comm if self.subject == "comm" else proc.name
        return all(stage.keeps(subject) for stage in self.stages)


# --------------------------------------------------------------------------- option parsing


def _getopt(words: list[_Word], with_arg: set[str]) -> tuple[list[tuple[str, str | None]], int]:
    """getopt-style: options up to the first operand. Returns (options, operand index)."""
    opts: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        v = words[i].value
        if v == "--":
            return opts, i + 1
        if len(v) < 2 or v[0] != "-":
            return opts, i
        i += _parse_option(words, i, with_arg, opts)
    return opts, i


def _getopt_permuted(words: list[_Word], with_arg: set[str]) -> tuple[list, list[_Word]]:
    """GNU getopt_long, which permutes: options may follow operands (`pkill train.py -f`)."""
    opts: list[tuple[str, str | None]] = []
    operands: list[_Word] = []
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
        i += _parse_option(words, i, with_arg, opts)
    return opts, operands


def _parse_option(words: list[_Word], i: int, with_arg: set[str], opts: list) -> int:
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


def _signal_number(spec: str | None) -> int | None:
    if spec is None:
        return None
    spec = spec.strip().upper()
    if spec.isdigit():
        return int(spec)
    return _SIGNALS.get(spec[3:] if spec.startswith("SIG") else spec)


def _take_signal_spec(words: list[_Word]) -> tuple[int | None, list[_Word]]:
    """pkill/killall accept `-9`, `-KILL`, `-SIGKILL` anywhere; remove and return it."""
    for k, w in enumerate(words):
        if w.value.startswith("-") and not w.value.startswith("--"):
            number = _signal_number(w.value[1:])
            if number is not None:
                return number, words[:k] + words[k + 1:]
    return None, words


# --------------------------------------------------------------------------- wrappers

# These exec the command in their own place: no process of theirs stays around it.
_TRANSPARENT = {
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
    "nohup": set(), "nice": {"-n", "--adjustment"}, "ionice": {"-c", "-n", "-p", "--class",
                                                               "--classdata"},
    "stdbuf": {"-i", "-o", "-e", "--input", "--output", "--error"}, "setsid": set(),
    "exec": {"-a"}, "command": set(), "builtin": set(), "chrt": set(), "taskset": set(),
    "numactl": {"-C", "-N", "-m", "-p", "-i", "-P"}, "ulimit": set(),
}
_TRANSPARENT_POSITIONAL = {"chrt": 1, "taskset": 1}
# These fork the command and wait for it: their own process, with its argv, stays around it.
_PERSISTENT = {
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
_PERSISTENT_POSITIONAL = {"timeout": 1, "flock": 1}
_CATCHES_SIGNALS = {"sudo", "doas", "timeout"}  # they catch and relay TERM, INT, HUP ...


def _unwrap(words: list[_Word]) -> tuple[list[list[_Word]], list[_Word]]:
    """Strip env/nohup/sudo/timeout...: (argvs of wrappers that stay alive, the command)."""
    persistent: list[list[_Word]] = []
    for _ in range(16):
        if not words:
            break
        name = _basename(words[0].value)
        table = _TRANSPARENT.get(name, _PERSISTENT.get(name))
        if table is None or not words[0].literal:
            break
        if name in _PERSISTENT:
            persistent.append(words)
        _, k = _getopt(words[1:], table)
        k += 1
        if name == "env":
            while k < len(words) and _ASSIGNMENT.match(words[k].value):
                k += 1
        if name == "sudo":
            while k < len(words) and _ASSIGNMENT.match(words[k].value):
                k += 1
        k += _TRANSPARENT_POSITIONAL.get(name, 0) + _PERSISTENT_POSITIONAL.get(name, 0)
        words = words[k:]
    return persistent, words


# --------------------------------------------------------------------------- command tables

# Programs that are not "the job": running them does not start what a kill pattern is for.
_UTILITIES = {
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
_CHECKS = {"pgrep", "pidof", "ps", "tail", "head", "cat", "less", "grep", "nvidia-smi",
           "jobs", "wait", "runward", "journalctl", "lsof", "ss", "netstat", "curl", "test",
           "[", "[["}
_SLEEP_CHECKS = _CHECKS - {"wait", "jobs", "runward", "test", "[", "[["}
_PASSTHROUGH = {"awk", "cut", "sed", "tr", "head", "tail", "sort", "uniq", "grep", "egrep",
                "fgrep"}
_DURATION = re.compile(r"\d+(\.\d+)?[smhd]?|\.\d+[smhd]?")

_PGREP_WITH_ARG = {"-d", "--delimiter", "-g", "--pgroup", "-G", "--group", "-P", "--parent",
                   "-s", "--session", "-t", "--terminal", "-u", "--euid", "-U", "--uid", "-F",
                   "--pidfile", "-r", "--runstates", "-O", "--older", "-q", "--queue", "--ns",
                   "--nslist", "--cgroup", "--signal", "--env"}
_KILLALL_WITH_ARG = {"-s", "--signal", "-u", "--user", "-o", "--older-than", "-y",
                     "--younger-than", "-n", "--ns", "-Z", "--context"}
_GREP_WITH_ARG = {"-e", "--regexp", "-f", "--file", "-m", "--max-count", "-A", "-B", "-C",
                  "--after-context", "--before-context", "--context", "--label", "-d", "-D",
                  "--include", "--exclude", "--exclude-dir", "--binary-files", "--devices",
                  "--directories"}
_SSH_WITH_ARG = {"-" + c for c in "BbcDEeFIiJLlmOoPpQRSWw"}
_SCP_WITH_ARG = {"-" + c for c in "cDFiJlMoPSX"}
_RSYNC_WITH_ARG = {"-e", "--rsh", "-f", "--filter", "--exclude", "--include", "--exclude-from",
                   "--include-from", "--files-from", "-T", "--temp-dir", "--log-file",
                   "--chmod", "--port", "-B", "--block-size", "--partial-dir", "--rsync-path",
                   "-M", "--remote-option", "--bwlimit", "--timeout", "--compare-dest",
                   "--copy-dest", "--link-dest", "--backup-dir", "--suffix", "--max-size",
                   "--min-size", "--out-format", "--password-file", "--info", "--debug"}
_CP_WITH_ARG = {"-t", "--target-directory", "-S", "--suffix"}
_DOCKER_EXEC_WITH_ARG = {"-e", "--env", "--env-file", "-u", "--user", "-w", "--workdir",
                         "--detach-keys", "--preserve-fds"}
_LXC_ATTACH_WITH_ARG = {"-n", "--name", "-a", "--arch", "-s", "--namespaces", "-u", "--uid",
                        "-g", "--gid", "-f", "--rcfile", "-P", "--lxcpath", "-o", "--logfile",
                        "-l", "--logpriority", "-v", "--set-var", "--keep-var"}
_KUBECTL_WITH_ARG = {"-n", "--namespace", "-c", "--container", "--context", "--kubeconfig",
                     "--cluster", "--user", "-f", "--filename", "--pod-running-timeout", "-s",
                     "--server"}
_SHELL_WITH_ARG = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}


# --------------------------------------------------------------------------- rule texts

_WHY_SELF_KILL = (
    "pkill -f and pgrep -f match the regex against the whole command line of every process "
    "(/proc/PID/cmdline, NULs read as spaces) and skip only their own pid. A shell started "
    "with -c (by bash -c, by sshd for `ssh HOST CMD`, by an agent tool) keeps the whole "
    "script, this pattern included, in its argv, so it is signalled too: the commands after "
    "this one in that shell never run, its exit status is the signal's, and `|| true` cannot "
    "help (docs/from-shell.md, \"Stop, then start again, in one ssh call\").")
_WHY_KILLALL = (
    "killall matches process names (the comm that `ps -o comm` shows, the basename of the "
    "program), and this name or regex matches the name of a process that encloses the "
    "command, so that process is signalled and whatever it was running stops with it.")
_WHY_PS_GREP_KILL = (
    "ps lists every process with its whole command line and grep keeps the lines that match: "
    "the shell running this pipeline carries the pattern in its own command line, so its pid "
    "is in the list that kill receives, and the shell is killed along with the target "
    "(docs/from-shell.md, \"Kill by pattern\").")
_WHY_FRAGILE = (
    "pkill -f skips only its own pid. Here the only shell whose command line matches "
    "replaces itself with this command (exec) because it is the only or last command of its "
    "-c string, so by the time pkill looks that shell is pkill. Add anything after it "
    "(`; nohup ...`, `&& echo done`, a redirection), run it under an older bash or dash, and "
    "the shell kills itself.")
_WHY_SELF_LIST = (
    "pgrep -f and `ps | grep` match against whole command lines, and a shell running this "
    "line carries the pattern in its own argv (as does the grep itself), so the output lists "
    "that shell: the check reports the job alive, or finds a pid to kill, when the job is not "
    "running at all.")
_WHY_KILL_THEN_START = (
    "One shell line that kills and starts the same program races with itself: pkill returns "
    "once the signal is sent, not once the old run has exited (it may still hold GPUs and "
    "ports while it checkpoints), and a pattern that matches the new run or the shell that "
    "starts it takes the start with it. A stop verified dead and a start verified alive are "
    "separate steps (docs/from-shell.md, \"Stop, then start again, in one ssh call\").")
_FIX_KILL_THEN_START = (
    "do them as separate calls: `runward stop NAME` (verified dead, GPUs released), then "
    "`runward start NAME -- COMMAND` (verified alive); or `runward restart NAME`, which "
    "stops, verifies, deploys, verifies, starts and verifies as separate steps.")
_WHY_HOST_PATH = (
    "A container (pct/lxc, docker, podman) has its own root filesystem: /root inside it is "
    "not the host's /root. The job inside keeps running whatever file the container has at "
    "that path, the old code or none at all, and nothing says so (docs/from-shell.md, "
    "\"Copy the patched file, then run\"). "
    "Only a path bind-mounted into the container is shared.")
_WHY_NOHUP = (
    "A background launch returns at once, whatever happens to the job: a typo, a missing "
    "file, a CUDA OOM in the first second all look exactly like success, and `no output` "
    "cannot be told from `never started` (docs/from-shell.md, \"Is it running? Did it "
    "crash? With what code?\").")
_FIX_NOHUP = (
    "`runward start NAME -- COMMAND` launches it detached, watches it for a settle period and "
    "reports an early exit at once with its exit code and last log lines; short of that, "
    "follow the launch with a check of the pid and the log.")
_WHY_SLEEP = (
    "A fixed sleep is a guess: too short and the job has not failed yet (or the GPUs are "
    "not freed yet), too long and it wastes time; one look after it only proves the job was "
    "alive at that instant (docs/from-shell.md, \"A fixed sleep as verification\").")
_FIX_SLEEP = (
    "`runward start NAME -- COMMAND` verifies the job alive after a settle period and "
    "reports an early exit at once; `runward stop NAME` waits until it is verified dead and "
    "its GPUs are released; `runward watch NAME` follows health and exits non-zero on an "
    "alert.")
_WHY_PARSE = (
    "A shell refuses this line (`unexpected EOF while looking for matching ...`) and runs "
    "none of it, and lint cannot tell what it would do. For a nested string, the outer "
    "command runs and the inner shell fails, which from outside looks like `no output`.")
_FIX_PARSE = (
    "close the quote. Hand-nested quoting is where this goes wrong: build an argv and quote "
    "once, e.g. `runward exec --on TARGET -- COMMAND ARG...`.")


# --------------------------------------------------------------------------- the linter

_MAX_DEPTH = 24
_MAX_VERIFICATIONS = 16


@dataclass
class _KillEvent:
    query: _Query
    domain: tuple
    span: tuple[int, int]
    text: str


@dataclass
class _StartEvent:
    proc: _Proc
    domain: tuple
    text: str


@dataclass
class _Launch:
    seq: int
    domain: tuple
    span: tuple[int, int]
    text: str


@dataclass
class _Copy:
    domain: tuple
    paths: frozenset
    text: str
    where: str


class _Linter:
    """Walks a command line once, level by level, collecting findings."""

    def __init__(self, command: str, assume_shell: bool, suggest: bool = True):
        self.command = command
        self.assume_shell = assume_shell
        # Bracket-trick suggestions are verified by linting the fixed line again: a bounded
        # number of times, so that a long script with many kills stays fast.
        self.suggest = suggest
        self.verifications_left = _MAX_VERIFICATIONS
        self.findings: list[Finding] = []
        self.seq = 0
        self.kills: list[_KillEvent] = []
        self.starts: list[_StartEvent] = []
        self.launches: list[_Launch] = []
        self.checks: list[tuple[int, tuple]] = []
        self.copies: list[_Copy] = []
        self.reported_copies: set[int] = set()

    # ---- driving

    def run(self) -> list[Finding]:
        top = _Source(self.command, tuple(range(len(self.command))))
        try:
            script = _parse(top)
        except _ParseError as e:
            return [self._parse_error(top, e, nested=False)]
        self._walk_script(script, self._top_context())
        if self.suggest:  # a verification pass only needs the self-match findings
            self._finish()
        unique = {(f.rule, f.start, f.end, f.message): f for f in self.findings}
        return sorted(unique.values(), key=lambda f: (f.start, _SEVERITY_RANK[f.severity],
                                                      f.end, f.rule))

    def _top_context(self) -> _Ctx:
        if self.assume_shell:
            # An agent tool (or a script) runs the command as `bash -c '<command>'` and wraps
            # it in commands of its own, so that shell stays alive while the command runs.
            agent = _Proc(("bash", "-c", self.command), (), 0, "agent", family="agent")
            return _Ctx(enclosing=(agent,), runner=0)
        # An interactive shell's argv is just `-bash`; it ignores SIGTERM (bash(1), SIGNALS).
        interactive = _Proc(("-bash",), (), 0, "interactive", catches=True)
        return _Ctx(enclosing=(interactive,))

    def _walk_source(self, src: _Source, ctx: _Ctx) -> None:
        if ctx.depth > _MAX_DEPTH:
            return
        try:
            script = _parse(src)
        except _ParseError as e:
            self.findings.append(self._parse_error(src, e, nested=True))
            return
        self._walk_script(script, ctx)

    def _walk_script(self, script: _Script, ctx: _Ctx) -> None:
        for idx, pipeline in enumerate(script.pipelines):
            pipeline_ctx = self._runner_state(script, idx, ctx)
            handled = self._check_loop_kills(script, idx, pipeline_ctx)
            self._walk_pipeline(pipeline, pipeline_ctx, handled, script, idx)
            self._check_sleep(script, idx, ctx)

    def _runner_state(self, script: _Script, idx: int, ctx: _Ctx) -> _Ctx:
        """Is the shell reading this script still alive while this pipeline runs?

        bash, zsh and ksh exec the only command of a -c string instead of forking it (bash
        >= 5.1 also the last one), unless it has redirections; dash does not. Verified with
        bash 5.2 and dash 0.5.12: `bash -c 'pkill -f X'` survives, `sh -c ...` does not, nor
        `bash -c 'pkill -f X 2>/dev/null'`, nor `bash -c 'sleep 1 & pkill -f X'`.
        """
        if ctx.runner < 0:
            return ctx
        runner = ctx.enclosing[ctx.runner]
        pipeline = script.pipelines[idx]
        state = "alive"
        if (runner.family in _EXEC_SHELLS and not script.compound
                and len(pipeline.commands) == 1 and not pipeline.background
                and not pipeline.negated and not pipeline.commands[0].redirs):
            if len(script.pipelines) == 1:
                state = "exec-lone"
            elif idx == len(script.pipelines) - 1 and not any(
                    p.background for p in script.pipelines[:idx]):
                state = "exec-last"  # not with a background job pending: bash waits for it
        command = pipeline.commands[0]
        if command.words and command.words[0].value == "exec" and len(command.words) > 1:
            state = "exec"
        return ctx.with_runner_state(state)

    def _walk_pipeline(self, pipeline: _Pipeline, ctx: _Ctx, handled: set[int] | None = None,
                       script: _Script | None = None, idx: int = 0) -> None:
        handled = set() if handled is None else handled
        self._check_process_pipeline(pipeline, ctx, handled, script, idx)
        for command in pipeline.commands:
            self._walk_command(command, ctx, handled)
        if pipeline.background:
            self._record_launch(pipeline, ctx)

    def _walk_command(self, command: _Command, ctx: _Ctx, handled: set[int]) -> None:
        self.seq += 1
        wrappers, words = _unwrap(command.words)
        if not command.expanded:
            if words and _basename(words[0].value) == "kill":
                self._check_kill_substitutions(words, command, ctx, handled)
            self._walk_substitutions(command, ctx, handled)
        self._check_container_paths(command, ctx)
        if not words:
            return
        procs = [_Proc(_values(w), ctx.domain, ctx.level, "wrapper", ctx.where,
                       catches=_basename(w[0].value) in _CATCHES_SIGNALS) for w in wrappers]
        self._dispatch(words, command, ctx.push(*procs) if procs else ctx, handled)

    def _walk_substitutions(self, command: _Command, ctx: _Ctx, handled: set[int]) -> None:
        # $(...) and `...` run in a forked subshell while this shell waits for their output,
        # so this shell is alive (and visible to pgrep) whatever comes after.
        sub_ctx = replace(ctx.with_runner_state("alive"), depth=ctx.depth + 1)
        for word in command.all_words():
            for sub in word.subs:
                if id(sub) not in handled:
                    self._walk_source(sub, sub_ctx)

    def _dispatch(self, words: list[_Word], command: _Command, ctx: _Ctx,
                  handled: set[int]) -> None:
        name = _basename(words[0].value)
        if name in _SHELLS and self._walk_shell_string(words, ctx):
            return
        if name == "ssh" and self._walk_ssh(words, ctx):
            return
        hop = _container_hop(words)
        if hop is not None:
            self._walk_container(hop, words, ctx)
            return
        if name == "eval" and len(words) > 1:
            self._walk_source(_join_words(words[1:]),
                              replace(ctx.with_runner_state("alive"), depth=ctx.depth + 1))
            return
        if name in ("su", "runuser") and self._walk_su(words, ctx):
            return
        if name == "watch" and self._walk_watch(words, ctx):
            return
        self._check_program(words, command, ctx, handled)

    # ---- hops: each knows what process it leaves behind and where the rest runs

    def _walk_shell_string(self, words: list[_Word], ctx: _Ctx) -> bool:
        opts, k = _getopt(words[1:], _SHELL_WITH_ARG)
        if not any(flag == "-c" for flag, _ in opts) or k + 1 >= len(words):
            return False  # `bash script.sh` or bash reading stdin: nothing to follow
        shell = _Proc(_values(words), ctx.domain, ctx.level + 1, "shell", ctx.where,
                      family=_basename(words[0].value))
        inner = ctx.push(shell, level=ctx.level + 1, runner=len(ctx.enclosing))
        self._walk_source(words[k + 1].source(), inner)
        return True

    def _walk_ssh(self, words: list[_Word], ctx: _Ctx) -> bool:
        opts, k = _getopt(words[1:], _SSH_WITH_ARG)
        k += 1
        if k >= len(words):
            return True
        host_word = words[k]
        # OpenSSH parses options again right after the host (`ssh HOST -p 22 CMD`).
        more, j = _getopt(words[k + 1:], _SSH_WITH_ARG)
        opts += more
        remote = words[k + 1 + j:]
        if not remote:
            return True  # an interactive login: nothing to lint
        user = next((v for f, v in opts if f == "-l" and v), None)
        port = next((v for f, v in opts if f == "-p" and v), None)
        host = host_word.value
        display = host if "@" in host or not user else f"{user}@{host}"
        host_key = host.rsplit("@", 1)[-1].lower()
        client = _Proc(_values(words), ctx.domain, ctx.level, "client", ctx.where)
        if host_key in _LOOPBACK:
            domain, where, target = ctx.domain, ctx.where, ctx.target
        else:
            domain, where = (("ssh", host_key),), f"on {display}"
            target = f"ssh://{display}" + (f":{port}" if port else "")
        joined = _join_words(remote)
        # sshd runs the user's login shell as `SHELL -c '<the words, joined by spaces>'`.
        shell = _Proc(("bash", "-c", joined.text), domain, ctx.level + 1, "sshd-shell", where,
                      family="bash")
        inner = ctx.push(client, shell, domain=domain, where=where, target=target,
                         level=ctx.level + 1, runner=len(ctx.enclosing) + 1)
        self._walk_source(joined, inner)
        return True

    def _walk_container(self, hop: tuple[str, str, str, list[_Word]], words: list[_Word],
                        ctx: _Ctx) -> None:
        kind, ident, label, argv = hop
        client = _Proc(_values(words), ctx.domain, ctx.level, "client", ctx.where)
        where = f"inside {label}" + (f" {ctx.where}" if ctx.where else "")
        target = None
        if ctx.target is not None and kind != "kubectl":
            target = f"{ctx.target}/{kind}:{ident}" if ctx.target else f"{kind}:{ident}"
        inner = ctx.push(client, domain=ctx.domain + ((kind, ident),), where=where,
                         target=target, runner=-1)
        if argv:
            # The hop execs this argv directly, no shell: its words were expanded out here.
            command = _Command(list(argv), expanded=True)
            self._walk_pipeline(_Pipeline([command], None), inner)

    def _walk_su(self, words: list[_Word], ctx: _Ctx) -> bool:
        for k, w in enumerate(words[1:-1], 1):
            if w.value in ("-c", "--command"):
                su = _Proc(_values(words), ctx.domain, ctx.level, "wrapper", ctx.where,
                           catches=True)
                # su runs the target user's shell as `SHELL -c CMD`; bash is assumed.
                shell = _Proc(("bash", "-c", words[k + 1].value), ctx.domain, ctx.level + 1,
                              "shell", ctx.where, family="bash")
                inner = ctx.push(su, shell, level=ctx.level + 1,
                                 runner=len(ctx.enclosing) + 1)
                self._walk_source(words[k + 1].source(), inner)
                return True
        return False

    def _walk_watch(self, words: list[_Word], ctx: _Ctx) -> bool:
        opts, k = _getopt(words[1:], {"-n", "--interval"})
        if k + 1 >= len(words) or any(f in ("-x", "--exec") for f, _ in opts):
            return False
        joined = _join_words(words[k + 1:])
        watch = _Proc(_values(words), ctx.domain, ctx.level, "wrapper", ctx.where)
        # watch(1) runs its arguments, joined by spaces, with `sh -c` every interval.
        shell = _Proc(("sh", "-c", joined.text), ctx.domain, ctx.level + 1, "shell", ctx.where,
                      family="sh")
        inner = ctx.push(watch, shell, level=ctx.level + 1, runner=len(ctx.enclosing) + 1)
        self._walk_source(joined, inner)
        return True

    # ---- programs

    def _check_program(self, words: list[_Word], command: _Command, ctx: _Ctx,
                       handled: set[int]) -> None:
        name = _basename(words[0].value)
        if id(command) not in handled:
            if name == "pkill":
                self._check_pkill(words, command, ctx)
            elif name == "killall":
                self._check_killall(words, command, ctx)
        if name in ("scp", "rsync", "cp") or (name in ("docker", "podman", "pct")
                                              and len(words) > 1
                                              and words[1].value in ("cp", "push")):
            self._record_copy(name, words, ctx)
        if _is_check(words):
            self.checks.append((self.seq, ctx.domain))
        elif name not in _UTILITIES and words[0].value:
            proc = _Proc(_values(words), ctx.domain, ctx.level, "started", ctx.where)
            self.starts.append(_StartEvent(proc, ctx.domain, _command_text(command.words)))

    def _check_pkill(self, words: list[_Word], command: _Command, ctx: _Ctx) -> None:
        query, signal = _pgrep_query(words)
        if query is not None:
            self._evaluate(query, ctx, signal=signal, span=command.span(),
                           text=_command_text(words), words=words)

    def _check_killall(self, words: list[_Word], command: _Command, ctx: _Ctx) -> None:
        signal, args = _take_signal_spec(words[1:])
        opts, operands = _getopt_permuted(args, _KILLALL_WITH_ARG)
        flags = {f for f, _ in opts}
        signal = _first_signal(_signal_number(next((v for f, v in opts
                                                    if f in ("-s", "--signal")), None)),
                               signal, 15)
        if not operands or not all(w.literal for w in operands):
            return
        names = tuple(w.value for w in operands)
        if flags & {"-r", "--regexp"}:
            icase = bool(flags & {"-I", "--ignore-case"})
            regexes = tuple(r for r in (_compile_posix(n, "ere", icase) for n in names) if r)
            if not regexes:
                return
            query = _Query("killall", " ".join(names), operands[0], "name", (_Stage(regexes),))
        else:
            query = _Query("killall", " ".join(names), operands[0], "name", (), exact_names=names)
        self._evaluate(query, ctx, signal=signal, span=command.span(),
                       text=_command_text(words), words=words)

    def _check_kill_substitutions(self, words: list[_Word], command: _Command, ctx: _Ctx,
                                  handled: set[int]) -> None:
        """`kill $(pgrep -f P)`, `kill \\`ps aux | grep P | awk ...\\``: the list is the kill."""
        signal = _kill_signal(words[1:])
        for word in words[1:]:
            for sub in word.subs:
                self._check_listed_then_killed(sub, signal, command.span(),
                                               _command_text(words), ctx, handled)

    def _check_loop_kills(self, script: _Script, idx: int, ctx: _Ctx) -> set[int]:
        """`for p in $(pgrep -f P); do kill $p; done`: the substitution feeds a kill."""
        handled: set[int] = set()
        for command in script.pipelines[idx].commands:
            head = command.skipped
            if len(head) < 4 or head[0].value != "for" or head[2].value != "in":
                continue
            found = _loop_kill(script, idx + 1, head[1].value)
            if found is None:
                continue
            signal, kill_words = found
            text = f"for {head[1].value} in ...; kill ... ${head[1].value}"
            for word in head[3:]:
                for sub in word.subs:
                    self._check_listed_then_killed(sub, signal, command.span(), text, ctx,
                                                   handled)
        return handled

    def _check_listed_then_killed(self, sub: _Source, signal: int, span, text: str,
                                  ctx: _Ctx, handled: set[int]) -> None:
        try:
            script = _parse(sub)
        except _ParseError:
            return
        if len(script.pipelines) != 1:
            return
        progs = [_unwrap(c.words) for c in script.pipelines[0].commands]
        found = _lister_at(progs, 0)
        if found is None:
            return
        handled.add(id(sub))
        # The substitution runs in a subshell while this shell waits: this shell is alive.
        sub_ctx = replace(ctx.with_runner_state("alive"), depth=ctx.depth + 1)
        wrappers = [_Proc(_values(w), ctx.domain, ctx.level, "wrapper", ctx.where)
                    for w in progs[0][0]]
        self._evaluate(found[0], sub_ctx, signal=signal, span=span, text=text, words=None,
                       extra=wrappers)

    def _check_process_pipeline(self, pipeline: _Pipeline, ctx: _Ctx, handled: set[int],
                                script: _Script | None = None, idx: int = 0) -> None:
        """pgrep -f P, `ps aux | grep P`, and either one piped to `xargs kill` or to
        `while read p; do kill $p; done`."""
        progs = [_unwrap(c.words) for c in pipeline.commands]
        i = 0
        while i < len(progs):
            found = _lister_at(progs, i)
            if found is None:
                i += 1
                continue
            query, end = found
            handled.update(id(c) for c in pipeline.commands[i:end])
            consumer = _kill_consumer(progs, end, script, idx)
            last = consumer[0] if consumer else end - 1
            span = (pipeline.commands[i].span()[0], pipeline.commands[last].span()[1])
            text = " | ".join(_command_text(c.words) for c in pipeline.commands[i:last + 1])
            own = [_Proc(_values(w), ctx.domain, ctx.level, "wrapper", ctx.where)
                   for w in progs[i][0]]
            siblings = [_Proc(_values(c.words), ctx.domain, ctx.level, "sibling", ctx.where)
                        for k, c in enumerate(pipeline.commands)
                        if k != i or query.tool == "ps|grep"]
            self._evaluate(query, ctx, signal=consumer[1] if consumer else None, span=span,
                           text=text, words=None, extra=own, siblings=siblings)
            i = end

    # ---- the self-match rules

    def _evaluate(self, query: _Query, ctx: _Ctx, *, signal: int | None, span, text: str,
                  words: list[_Word] | None, extra: list[_Proc] = (),
                  siblings: list[_Proc] = ()) -> None:
        visible = [p for p in ctx.enclosing if _sees(ctx.domain, p.domain)] + list(extra)
        if query.ignores_ancestors:
            visible = []
        matched = [p for p in visible if query.selects(p)]
        if signal is not None and signal not in _HARMLESS_SIGNALS:
            self.kills.append(_KillEvent(query, ctx.domain, span, text))
            killed = [p for p in matched if p.state == "alive" and _harmed(p, signal)]
            spared = [p for p in matched if p.state in ("exec-lone", "exec-last")
                      and _harmed(p, signal)]
            if killed:
                self._add_self_kill(query, ctx, killed, signal, span, text, words)
            elif spared:
                self._add_fragile(query, ctx, spared, span, text)
            return
        listed = [p for p in matched if p.state == "alive" and p.role != "interactive"]
        listed += [p for p in siblings if query.selects(p)]
        if listed:
            self._add_self_list(query, ctx, listed, span, text)

    def _add_self_kill(self, query, ctx, killed, signal, span, text, words) -> None:
        victim = killed[-1]
        others = f"; {len(killed) - 1} more enclosing process(es) match too" if len(
            killed) > 1 else ""
        sig = _SIGNAL_NAMES.get(signal, str(signal))
        what = "process name" if query.subject == "name" else "command line"
        message = (f"`{text}` kills its own {_noun(victim)}: pattern {query.pattern!r} matches the "
                   f"{what} of the enclosing `{_display(victim.argv)}` "
                   f"({_describe(victim)}), which gets SIG{sig}{others}")
        why = {"killall": _WHY_KILLALL, "ps|grep": _WHY_PS_GREP_KILL}.get(query.tool,
                                                                          _WHY_SELF_KILL)
        fix = _safe_kill_fix(query, ctx)
        bracket = self._bracket_fix(query, span, "self-kill", words)
        self._add("self-kill", span, message, why, fix + bracket)

    def _add_fragile(self, query, ctx, spared, span, text) -> None:
        shell = spared[-1]
        when = ("it is the only command of that string" if shell.state == "exec-lone" else
                "it is the last command of that string (bash >= 5.1 and zsh exec it; older "
                "bash and dash are killed)")
        message = (f"`{text}` survives by luck: pattern {query.pattern!r} matches the command "
                   f"line of the enclosing `{_display(shell.argv)}` ({_describe(shell)}), "
                   f"which is spared only because it replaces itself with this command: "
                   f"{when}")
        fix = (_safe_kill_fix(query, ctx) + "; if you keep it, keep it the last command of "
               "its string, with no redirection")
        self._add("self-kill-fragile", span, message, _WHY_FRAGILE, fix)

    def _add_self_list(self, query, ctx, listed, span, text) -> None:
        shown = listed[-1]
        if shown.role == "sibling":
            whose = f"`{_display(shown.argv)}` in the same pipeline"
        else:
            whose = f"the enclosing `{_display(shown.argv)}` ({_describe(shown)})"
        message = (f"`{text}` lists its own shell: pattern {query.pattern!r} matches the "
                   f"command line of {whose}")
        on = f" --on {ctx.target}" if ctx.target else ""
        fix = (f"use `runward ps {_always_quote(query.pattern)}{on}` (never lists itself, its "
               f"ancestors or its session's shells)")
        fix += self._bracket_fix(query, span, "self-match-list", None)
        self._add("self-match-list", span, message, _WHY_SELF_LIST, fix)

    def _bracket_fix(self, query: _Query, span, rule: str, words: list[_Word] | None) -> str:
        """Suggest `[t]rain.py` only after linting the line with it and seeing it work."""
        word = query.word
        if word is None or query.subject in ("name", "comm") or not word.literal:
            return ""
        bracketed = _bracket_trick(word.value)
        if bracketed is None:
            return ""
        shown = (_bracketed_command(words, word, bracketed) if words
                 else _always_quote(bracketed))
        fixed = self._with_bracket(word, bracketed)
        if fixed is None or not self.suggest or self.verifications_left <= 0:
            return (f", or the bracket trick: {shown}, whose own text no longer matches "
                    f"(check that nothing else on that line does)")
        self.verifications_left -= 1
        again = _Linter(fixed, self.assume_shell, suggest=False).run()
        if not any(f.rule == rule and f.start == span[0] for f in again):
            return f", or the bracket trick: {shown}, whose own text no longer matches"
        action = "kill" if rule == "self-kill" else "check"
        return (f". The bracket trick ({_always_quote(bracketed)}) does not help here: "
                f"{_still_matching(query, fixed)} on the same line matches the pattern too, "
                f"so make the {action} a call of its own")

    def _with_bracket(self, word: _Word, bracketed: str) -> str | None:
        """The top-level command with the pattern word rewritten, or None if it is not
        spelled out contiguously there (escapes between its chars)."""
        if not word.pos:
            return None
        first, last = word.pos[0], word.pos[-1]
        if last - first + 1 != len(word.value) or self.command[first:last + 1] != word.value:
            return None
        return self.command[:first] + bracketed + self.command[last + 1:]

    # ---- other rules

    def _check_sleep(self, script: _Script, idx: int, ctx: _Ctx) -> None:
        pipeline = script.pipelines[idx]
        if len(pipeline.commands) != 1 or pipeline.background or idx + 1 >= len(
                script.pipelines):
            return
        _, words = _unwrap(pipeline.commands[0].words)
        if (len(words) < 2 or _basename(words[0].value) != "sleep"
                or not all(_DURATION.fullmatch(w.value) for w in words[1:])):
            return
        following = script.pipelines[idx + 1].commands[0]
        _, after = _unwrap(following.words)
        if after and _is_check(after, _SLEEP_CHECKS):
            sleep_text, check_text = _command_text(words), _command_text(after)
            message = (f"`{sleep_text}` then `{check_text}`: a fixed sleep stands in for "
                       f"verification")
            self._add("sleep-as-verification", pipeline.commands[0].span(), message,
                      _WHY_SLEEP, _FIX_SLEEP)

    def _record_launch(self, pipeline: _Pipeline, ctx: _Ctx) -> None:
        _, words = _unwrap(pipeline.commands[-1].words)
        if not words or _basename(words[0].value) in ("sleep", "wait", "true", ":"):
            return
        text = " | ".join(_command_text(c.words) for c in pipeline.commands) + " &"
        self.launches.append(_Launch(self.seq, ctx.domain, pipeline.span(), text))

    def _record_copy(self, name: str, words: list[_Word], ctx: _Ctx) -> None:
        landed = _copy_destination(name, words)
        if landed is None:
            return
        dest_host, dest_kind, paths = landed
        domain, where = ctx.domain, ctx.where
        if dest_kind is not None:
            domain = ctx.domain + (dest_kind,)
            where = f"inside {dest_kind[0]} {dest_kind[1]}"
        elif dest_host is not None:
            key = dest_host.rsplit("@", 1)[-1].lower()
            if key not in _LOOPBACK:
                domain, where = (("ssh", key),), f"on {dest_host}"
        self.copies.append(_Copy(domain, frozenset(paths), _command_text(words),
                                 where or "this machine"))

    def _check_container_paths(self, command: _Command, ctx: _Ctx) -> None:
        if not any(kind in _CONTAINER_KINDS for kind, _ in ctx.domain):
            return
        values = [w.value for w in command.words + [w for _, w in command.redirs]]
        for copy in self.copies:
            if id(copy) in self.reported_copies or not _inside_container(copy.domain, ctx.domain):
                continue
            path = next((p for v in values for p in copy.paths if _mentions(v, p)), None)
            if path is None or any(c.domain == ctx.domain and path in c.paths
                                   for c in self.copies):
                continue
            self.reported_copies.add(id(copy))
            owner = copy.where.removeprefix("on ")
            message = (f"`{_command_text(command.words)}` uses {path} {ctx.where}, but "
                       f"`{copy.text}` copied it to the filesystem of {owner}, which this "
                       f"container does not see")
            on = ctx.target or "TARGET"
            fix = (f"copy into the container's own filesystem: `runward push --on {on} "
                   f"LOCAL:{path}` (through the hop chain, sha256-checked), or `pct push ID "
                   f"SRC {path}` / `docker cp SRC CONTAINER:{path}`; or use a path "
                   f"bind-mounted into the container")
            self._add("host-path-in-container", command.span(), message, _WHY_HOST_PATH, fix)

    def _finish(self) -> None:
        for kill in self.kills:
            start = next((s for s in self.starts if _sees(kill.domain, s.domain)
                          and kill.query.selects(s.proc)), None)
            if start is not None:
                message = (f"`{kill.text}` and `{start.text}` kill and start the same program "
                           f"in one shell invocation: pattern {kill.query.pattern!r} matches "
                           f"the command line `{_display(start.proc.argv)}`")
                self._add("kill-then-start", kill.span, message, _WHY_KILL_THEN_START,
                          _FIX_KILL_THEN_START)
        for launch in self.launches:
            if not any(seq > launch.seq and _sees(domain, launch.domain)
                       for seq, domain in self.checks):
                message = (f"`{launch.text}` starts a job in the background and nothing after "
                           f"it checks that it started")
                self._add("unverified-nohup", launch.span, message, _WHY_NOHUP, _FIX_NOHUP)

    # ---- findings

    def _add(self, rule: str, span: tuple[int, int], message: str, why: str, fix: str) -> None:
        self.findings.append(Finding(rule, RULES[rule], span[0], span[1], message, why, fix))

    def _parse_error(self, src: _Source, e: _ParseError, nested: bool) -> Finding:
        start, _ = src.span(e.index, e.index + 1)
        end = src.span(0, len(src.text))[1] if src.text else start
        level = "a nested string" if nested else "the command line"
        message = f"cannot parse {level}: {e} (opened here)"
        return Finding("parse-error", RULES["parse-error"], start, max(end, start), message,
                       _WHY_PARSE, _FIX_PARSE)


# --------------------------------------------------------------------------- helpers


def _values(words: list[_Word]) -> tuple[str, ...]:
    return tuple(w.value for w in words)


def _join_words(words: list[_Word]) -> _Source:
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
    return _Source("".join(chars), tuple(pos), tuple(opaque))


def _container_hop(words: list[_Word]) -> tuple[str, str, str, list[_Word]] | None:
    """(kind, id, label, argv run inside) for pct/lxc-attach/lxc/docker/podman/kubectl exec."""
    name = _basename(words[0].value)
    rest = words[1:]
    if name == "pct" and len(rest) >= 2 and rest[0].value == "exec":
        argv = rest[2:]
        argv = argv[1:] if argv and argv[0].value == "--" else argv
        return "pct", rest[1].value, f"pct exec {rest[1].value}", argv
    if name == "lxc-attach":
        opts, k = _getopt(rest, _LXC_ATTACH_WITH_ARG)
        ident = next((v for f, v in opts if f in ("-n", "--name") and v), None)
        if ident is None and k < len(rest):
            ident, k = rest[k].value, k + 1
        if ident is None:
            return None
        argv = rest[k:]
        argv = argv[1:] if argv and argv[0].value == "--" else argv
        return "lxc", ident, f"lxc-attach -n {ident}", argv
    if name == "lxc" and len(rest) >= 2 and rest[0].value == "exec":
        opts, k = _getopt(rest[2:], {"--env", "--cwd", "--user", "--group", "--mode"})
        return "lxc", rest[1].value, f"lxc exec {rest[1].value}", rest[2 + k:]
    if name in ("docker", "podman"):
        if rest[:2] and rest[0].value == "container":
            rest = rest[1:]
        if not rest or rest[0].value != "exec":
            return None
        opts, k = _getopt(rest[1:], _DOCKER_EXEC_WITH_ARG)
        if k + 1 >= len(rest):
            return None
        ident = rest[1 + k].value
        return name, ident, f"{name} exec {ident}", rest[2 + k:]
    if name == "kubectl" and rest and rest[0].value == "exec":
        values = _values(rest)
        if "--" not in values:
            return None
        cut = values.index("--")
        opts, operands = _getopt_permuted(rest[1:cut], _KUBECTL_WITH_ARG)
        if not operands:
            return None
        ident = operands[0].value
        return "kubectl", ident, f"kubectl exec {ident}", rest[cut + 1:]
    return None


def _pgrep_query(words: list[_Word]) -> tuple[_Query | None, int | None]:
    """Parse pgrep/pkill options (procps-ng): the query, and for pkill the signal."""
    tool = _basename(words[0].value)
    signal, args = _take_signal_spec(words[1:]) if tool == "pkill" else (None, words[1:])
    opts, operands = _getopt_permuted(args, _PGREP_WITH_ARG)
    flags = {f for f, _ in opts}
    if tool == "pkill":
        signal = _first_signal(_signal_number(next((v for f, v in opts if f == "--signal"),
                                                   None)), signal, 15)
    if not operands or not operands[0].literal:
        return None, signal  # selects by -u/-P/... only, or a pattern known only at run time
    pattern = operands[0]
    regex = _compile_posix(pattern.value, "ere", bool(flags & {"-i", "--ignore-case"}),
                           bool(flags & {"-x", "--exact"}))
    if regex is None:
        return None, signal  # pkill rejects an invalid regex and signals nothing
    full = bool(flags & {"-f", "--full"})
    query = _Query(tool, pattern.value, pattern, "cmdline" if full else "comm",
                   (_Stage((regex,), bool(flags & {"-v", "--inverse"})),),
                   ignores_ancestors=bool(flags & {"-A", "--ignore-ancestors"}))
    return query, signal


def _grep_stage(words: list[_Word]) -> tuple[_Stage, str, _Word | None] | None:
    name = _basename(words[0].value)
    opts, operands = _getopt_permuted(words[1:], _GREP_WITH_ARG)
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
    regexes = tuple(_compile_posix(p, mode, icase, exact, word) for p in patterns)
    if not regexes or any(r is None for r in regexes):
        return None
    invert = bool(flags & {"-v", "--invert-match"})
    return _Stage(regexes, invert), " ".join(patterns), pattern_word


def _lister_at(progs: list, i: int) -> tuple[_Query, int] | None:
    """A process lister starting at pipeline stage i: pgrep P, or ps ... | grep P [| grep..]."""
    _, words = progs[i]
    if not words:
        return None
    name = _basename(words[0].value)
    if name == "pgrep":
        query, _ = _pgrep_query(words)
        return (query, i + 1) if query is not None else None
    if name != "ps":
        return None
    stages, texts, first_word = [], [], None
    j = i + 1
    while j < len(progs) and progs[j][1] and _basename(progs[j][1][0].value) in (
            "grep", "egrep", "fgrep"):
        parsed = _grep_stage(progs[j][1])
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
    subject = "psline" if _ps_shows_args(words[1:]) else "comm"
    return _Query("ps|grep", " | ".join(texts), first_word, subject, tuple(stages)), j


def _ps_shows_args(args: list[_Word]) -> bool:
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


def _kill_consumer(progs: list, j: int, script: _Script | None,
                   idx: int) -> tuple[int, int] | None:
    """After a lister: `... | awk '{print $2}' | xargs kill -9`, or `| while read p; do kill
    $p; done`: (stage index, signal)."""
    while j < len(progs) and progs[j][1] and _basename(progs[j][1][0].value) in _PASSTHROUGH:
        j += 1
    if j >= len(progs) or not progs[j][1]:
        return None
    wrappers, words = progs[j]
    name = _basename(words[0].value)
    if any(_basename(w[0].value) == "xargs" for w in wrappers) and name == "kill":
        return j, _kill_signal(words[1:])
    if name == "read" and script is not None and len(words) > 1:
        found = _loop_kill(script, idx + 1, words[-1].value)
        if found is not None:
            return j, found[0]
    return None


def _loop_kill(script: _Script, start: int, var: str) -> tuple[int, list[_Word]] | None:
    """A later `kill ... $var` in the same script: (its signal, its words)."""
    refs = {f"${var}", f"${{{var}}}"}
    for pipeline in script.pipelines[start:]:
        for command in pipeline.commands:
            _, words = _unwrap(command.words)
            if words and _basename(words[0].value) == "kill" and any(
                    w.value in refs for w in words[1:]):
                return _kill_signal(words[1:]), words
    return None


def _kill_signal(args: list[_Word]) -> int:
    """kill -9 / -KILL / -SIGKILL / -s KILL / -n 9 / --signal KILL; TERM by default."""
    for k, w in enumerate(args):
        v = w.value
        if v in ("-s", "-n", "--signal") and k + 1 < len(args):
            return _first_signal(_signal_number(args[k + 1].value), 15)
        if v.startswith("-") and len(v) > 1 and not v.startswith("--"):
            number = _signal_number(v[1:])
            if number is not None:
                return number
        if not v.startswith("-"):
            break
    return 15


def _first_signal(*candidates: int | None) -> int:
    return next(c for c in candidates if c is not None)


def _harmed(proc: _Proc, signal: int) -> bool:
    if signal in _HARMLESS_SIGNALS:
        return False
    if proc.catches:
        return signal in _UNCATCHABLE
    return True


def _is_check(words: list[_Word], names: set[str] = _CHECKS) -> bool:
    name = _basename(words[0].value)
    args = _values(words[1:])
    if name == "kill":
        return "-0" in args or ("-s" in args and "0" in args)
    if name == "systemctl":
        return bool(args) and args[0] in ("status", "is-active")
    return name in names


def _copy_destination(name: str, words: list[_Word]):
    """Where scp/rsync/cp/docker cp/pct push put files: (host or None, container hop or
    None, candidate paths as they could be spelled there). None when unknown."""
    if name in ("docker", "podman", "pct"):
        operands = [w.value for w in words[2:] if not w.value.startswith("-")]
        if name == "pct" and len(operands) >= 3:
            return None, ("pct", operands[0]), _landed_paths([operands[1]], operands[2], None)
        if name != "pct" and len(operands) == 2 and ":" in operands[1]:
            container, _, path = operands[1].partition(":")
            return None, (name, container), _landed_paths([operands[0]], path, None)
        return None
    table = {"scp": _SCP_WITH_ARG, "rsync": _RSYNC_WITH_ARG, "cp": _CP_WITH_ARG}[name]
    if name == "scp":
        opts, k = _getopt(words[1:], table)
        operands = words[1 + k:]
    else:
        opts, operands = _getopt_permuted(words[1:], table)
    target_dir = next((v for f, v in opts if f in ("-t", "--target-directory")), None)
    values = [w.value for w in operands]
    if target_dir is not None:
        sources, dest = values, target_dir + "/"
    elif len(values) >= 2:
        sources, dest = values[:-1], values[-1]
    else:
        return None
    host, user, path = None, None, dest
    remote = re.match(r"^(?:([^@/:]+)@)?([^/:\[\]]+|\[[^\]]+\]):(?!:)(.*)$", dest)
    if remote and name != "cp":
        user, host_name, path = remote.groups()
        host = f"{user}@{host_name}" if user else host_name
    sources = [s.split(":", 1)[-1] if re.match(r"^[^/:]+:", s) else s for s in sources]
    return host, None, _landed_paths(sources, path, user, remote=host is not None)


def _landed_paths(sources: list[str], dest: str, user: str | None,
                  remote: bool = True) -> set[str]:
    d = dest or "~"
    if remote and not d.startswith(("/", "~")):
        d = "~/" + d  # scp/rsync paths without a leading / are relative to the home directory
    is_dir = d.endswith("/") or len(sources) > 1 or d in ("~", ".")
    base = d.rstrip("/") or "/"
    paths = set() if is_dir else {base}
    paths.update(f"{base}/{_basename(s)}".replace("//", "/") for s in sources if _basename(s))
    for p in list(paths):
        if p.startswith("~/"):
            paths.add("$HOME/" + p[2:])
            if user in (None, "root"):
                paths.add("/root/" + p[2:])
        elif p.startswith("/root/") and user in (None, "root"):
            paths.add("~/" + p[6:])
    return paths


def _mentions(value: str, path: str) -> bool:
    return value == path or value.startswith(path + "/") or value.endswith("=" + path)


def _inside_container(copy_domain: tuple, use_domain: tuple) -> bool:
    extra = use_domain[len(copy_domain):]
    return (len(use_domain) > len(copy_domain) and use_domain[:len(copy_domain)] == copy_domain
            and all(kind in _CONTAINER_KINDS for kind, _ in extra))


def _still_matching(query: _Query, text: str) -> str:
    """The word of `text` that the query's first positive regex still finds, for messages."""
    stage = next((st for st in query.stages if not st.invert), None)
    m = stage.regexes[0].search(text) if stage else None
    if m is None:
        return "other text"
    begin = max(text.rfind(" ", 0, m.start()), text.rfind("'", 0, m.start()),
                text.rfind('"', 0, m.start()), text.rfind(";", 0, m.start())) + 1
    ends = [k for k in (text.find(c, m.end()) for c in " '\";") if k >= 0]
    return f"`{text[begin:min(ends, default=len(text))]}`"


def _safe_kill_fix(query: _Query, ctx: _Ctx) -> str:
    on = f" --on {ctx.target}" if ctx.target else ""
    return (f"use `runward kill {_always_quote(query.pattern)}{on} --yes` (the pattern travels on "
            f"stdin, never in an argv, and runward never signals its own ancestors)")


def _bracketed_command(words: list[_Word], word: _Word, bracketed: str) -> str:
    return " ".join(_quote(bracketed) if w is word else _quote(w.value) for w in words)


def _noun(proc: _Proc) -> str:
    if proc.role in ("client", "wrapper"):
        return f"{proc.name} {'client' if proc.role == 'client' else 'process'}"
    return "shell"


def _describe(proc: _Proc) -> str:
    """Where an enclosing process sits: `level 2, inside pct exec 200 on root@host`."""
    if proc.role == "agent":
        return ("level 0, the `bash -c` assumed to run this whole command, as an agent tool "
                "or a script does; lint with assume_shell=False for an interactive prompt")
    if proc.role == "interactive":
        return "your interactive shell"
    role = {"sshd-shell": "started by sshd", "wrapper": f"{proc.name} waiting for its command",
            "client": f"the {proc.name} client"}.get(proc.role)
    text = f"level {proc.level}" + (f", {role}" if role else "")
    if proc.where:
        text += (" " if proc.role == "sshd-shell" else ", ") + proc.where
    return text


def _display(argv: tuple[str, ...], limit: int = 60) -> str:
    shown = [a if len(a) <= limit else a[:limit - 3] + "..." for a in argv]
    return " ".join(_quote(a) for a in shown)


def _command_text(words: list[_Word], limit: int = 80) -> str:
    text = " ".join(_quote(w.value) for w in words)
    return text if len(text) <= limit else text[:limit - 3] + "..."


_SAFE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./~-]+")


def _quote(s: str) -> str:
    """POSIX single-quoting where needed, for display only."""
    return s if _SAFE_WORD.fullmatch(s) else _always_quote(s)


def _always_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"
