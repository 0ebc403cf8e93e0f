"""Shell words and operators, as a POSIX shell splits them (XCU 2.3), with quote removal.

Every character keeps the offset in the top-level command it came from, however deeply it is
nested (the argument of `bash -c`, the words ssh joins), so a finding at any depth points
into the string the user typed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Source:
    """Shell source text, with the offset in the top-level command of each of its chars.

    Nested strings (the argument of `bash -c`, the words ssh joins) are Sources too, so every
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
class Word:
    """A shell word after quote removal; expansions stay as their source text."""

    value: str
    pos: tuple[int, ...]  # top-level offset of each char of value
    start: int  # top-level span of the token as written
    end: int
    literal: bool = True  # no $expansion or `substitution` is left in value
    quoted: bool = False
    subs: list[Source] = field(default_factory=list)  # $(...) and `...` bodies
    expanded: tuple[tuple[int, int], ...] = ()  # value ranges this shell expands
    io_number: bool = False  # the 2 of 2>&1

    def source(self) -> Source:
        return Source(self.value, self.pos, self.expanded)


@dataclass
class Op:
    op: str
    start: int
    end: int


class ParseError(ValueError):
    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


OPERATORS = ("&>>", "<<<", "<<-", ";;&", "&&", "||", ";;", ";&", "|&", ">>", "<<", "<&",
             ">&", "<>", ">|", "&>", ";", "&", "|", "(", ")", "<", ">")
REDIRECTIONS = {"<", ">", ">>", "<<", "<<-", "<<<", "<&", ">&", "<>", ">|", "&>", "&>>"}
WORD_BREAK = frozenset(" \t\n;&|()<>")
PARAMETER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")
ANSI_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b",
               "E": "\x1b", "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


class WordBuilder:
    __slots__ = ("chars", "where", "literal", "quoted", "subs", "expanded")

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.where: list[int] = []
        self.literal = True
        self.quoted = False
        self.subs: list[Source] = []
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


class Lexer:
    """POSIX shell token recognition (XCU 2.3): words and operators, with quote removal."""

    def __init__(self, src: Source):
        self.src = src
        self.s = src.text
        self.n = len(src.text)
        self.i = 0
        self.opaque = dict(src.opaque)
        self.heredocs: list[tuple[str, bool]] = []
        self.want_delimiter: bool | None = None

    def tokens(self) -> list[Word | Op]:
        out: list[Word | Op] = []
        while (tok := self._next()) is not None:
            out.append(tok)
        return out

    def _next(self) -> Word | Op | None:
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
        for op in OPERATORS if c in ";&|()<>" else ():
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

    def _op(self, op: str) -> Op:
        start, end = self.src.span(self.i, self.i + len(op))
        self.i += len(op)
        return Op(op, start, end)

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

    def _word(self) -> Word:
        b = WordBuilder()
        start = self.i
        if self.s[self.i] in "<>":
            self._paren_substitution(b, self.i + 1, self.i)
        while self.i < self.n and self.s[self.i] not in WORD_BREAK:
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
        return Word("".join(b.chars), pos, top_start, top_end, b.literal, b.quoted, b.subs,
                    tuple(b.expanded))

    def _backslash(self, b: WordBuilder) -> None:
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

    def _single_quoted(self, b: WordBuilder) -> None:
        close = self.s.find("'", self.i + 1)
        if close < 0:
            raise ParseError("unterminated single quote", self.i)
        b.quoted = True
        b.add(self.s[self.i + 1:close], self.i + 1)
        self.i = close + 1

    def _double_quoted(self, b: WordBuilder) -> None:
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
        raise ParseError("unterminated double quote", opening)

    def _dollar(self, b: WordBuilder, in_double: bool) -> None:
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
            close = find_close(s, i + 1)
            if close < 0:
                raise ParseError("unterminated $(( or ${", i)
            b.add_expansion(s[i:close + 1], i)
            self.i = close + 1
        elif nxt == "(":
            self._paren_substitution(b, i + 1, i)
        elif m := PARAMETER.match(s, i + 1):
            b.add_expansion(s[i:m.end()], i)
            self.i = m.end()
        else:
            b.add("$", i)
            self.i += 1

    def _paren_substitution(self, b: WordBuilder, open_at: int, raw_from: int) -> None:
        close = find_close(self.s, open_at)
        if close < 0:
            raise ParseError("unterminated command substitution", raw_from)
        body = range(open_at + 1, close)
        b.subs.append(Source(self.s[open_at + 1:close], tuple(self.src.pos[k] for k in body)))
        b.add_expansion(self.s[raw_from:close + 1], raw_from)
        self.i = close + 1

    def _backquoted(self, b: WordBuilder) -> None:
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
            raise ParseError("unterminated backquote", i)
        b.subs.append(Source("".join(chars), tuple(self.src.pos[k] for k in where)))
        b.add_expansion(s[i:j + 1], i)
        self.i = j + 1

    def _ansi_c_quoted(self, b: WordBuilder) -> None:
        s, opening = self.s, self.i
        b.quoted = True
        j = opening + 2
        while j < self.n:
            if s[j] == "'":
                self.i = j + 1
                return
            if s[j] == "\\" and j + 1 < self.n:
                text, length = ansi_escape(s, j)
                for ch in text:
                    b.add_decoded(ch, j)
                j += length
            else:
                b.add(s[j], j)
                j += 1
        raise ParseError("unterminated $'...' string", opening)


def ansi_escape(s: str, j: int) -> tuple[str, int]:
    """Decode the bash $'...' escape at s[j] (a backslash): (text, chars consumed)."""
    e = s[j + 1]
    if e in ANSI_SIMPLE:
        return ANSI_SIMPLE[e], 2
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


def find_close(s: str, i: int) -> int:
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
                j = skip_backquote(s, j)
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
            j = skip_ansi_c(s, j)
        elif c == '"':
            stack.append('"')
            j += 1
        elif c == "`":
            j = skip_backquote(s, j)
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


def skip_backquote(s: str, j: int) -> int:
    k = j + 1
    while k < len(s) and s[k] != "`":
        k += 2 if s[k] == "\\" else 1
    return k + 1 if k < len(s) else len(s)


def skip_ansi_c(s: str, j: int) -> int:
    k = j + 2
    while k < len(s) and s[k] != "'":
        k += 2 if s[k] == "\\" else 1
    return k + 1 if k < len(s) else len(s)
