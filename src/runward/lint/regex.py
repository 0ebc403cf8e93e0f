"""POSIX regular expressions as pgrep, pkill, killall -r and grep read them, in Python's re.

A pattern is only worth judging if it is judged as the tool judges it: `[t]rain.py` does not
match its own text, `a**` is valid ERE, and regcomp(3) rejects what grep -E forgives.
"""

from __future__ import annotations

import re
from functools import lru_cache


CLASS_TEXT = {
    "alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
    "space": " \\t\\n\\r\\f\\v", "blank": " \\t", "xdigit": "0-9A-Fa-f",
    "punct": "!-/:-@\\[-`{-~",
    "print": "\\x20-\\x7e", "graph": "\\x21-\\x7e", "cntrl": "\\x00-\\x1f\\x7f",
}
INTERVAL = re.compile(r"\{(\d*)(,?)(\d*)\}")


@lru_cache(maxsize=512)
def compile_posix(pattern: str, mode: str = "ere", icase: bool = False, exact: bool = False,
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
            body = translate_posix(pattern, mode)
        if word:
            body = rf"(?<!\w)(?:{body})(?!\w)"
        if exact:
            body = rf"\A(?:{body})\Z"
        # No REG_NEWLINE: '.' matches a newline and ^/$ anchor only the whole string.
        return re.compile(body, re.DOTALL | (re.IGNORECASE if icase else 0))
    except (re.error, ValueError, OverflowError, RecursionError):
        return None


def translate_posix(p: str, mode: str) -> str:
    """POSIX ERE/BRE to Python re syntax; ValueError where the tool rejects the pattern.

    The flavours differ at the edges (checked against pgrep and GNU grep 3.8): regcomp
    rejects a leading `*` and a `{` that opens no interval, grep -E ignores the `*` and
    reads the `{` literally, and in a basic regex both are literal.
    """
    basic = mode == "grep-bre"
    strict = mode == "ere"
    leading = "literal" if basic else "error" if strict else "drop"
    return build_regex(regex_tokens(p, basic, strict), leading)


def regex_tokens(p: str, basic: bool, strict: bool) -> list[tuple[str, str]]:
    """(kind, text) tokens: lit, atom, anchor, quant, open, close, alt."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("trailing backslash")
            out.append(regex_escape(p[i + 1], basic))
            i += 2
            if out[-1][0] == "quant" and out[-1][1] == "{":  # BRE \{m,n\}
                m = re.compile(r"(\d*)(,?)(\d*)\\\}").match(p, i)
                if not m:
                    raise ValueError("bad interval")
                out[-1] = ("quant", interval_text(m.group(1), m.group(2), m.group(3)))
                i = m.end()
        elif c == "[":
            text, i = bracket_expression(p, i)
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
            m = INTERVAL.match(p, i)
            if m and (m.group(1) or m.group(3)):
                out.append(("quant", interval_text(m.group(1), m.group(2), m.group(3))))
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


def regex_escape(e: str, basic: bool) -> tuple[str, str]:
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


def interval_text(low: str, comma: str, high: str) -> str:
    if low and high and int(low) > int(high):
        raise ValueError("invalid interval")
    return "{" + (low or "0") + comma + high + "}"


def bracket_expression(p: str, i: int) -> tuple[str, int]:
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
                if name not in CLASS_TEXT:
                    raise ValueError("unknown class")
                items.append(CLASS_TEXT[name])
            else:
                items.extend(class_char(ch) for ch in name)
            j = close + 2
            continue
        if p[j + 1:j + 2] == "-" and j + 2 < n and p[j + 2] != "]":
            low, high = c, p[j + 2]
            if low > high:
                raise ValueError("invalid range")
            items.append(class_char(low) + "-" + class_char(high))
            j += 3
            continue
        items.append(class_char(c))
        j += 1
    return "[" + ("^" if negate else "") + "".join(items) + "]", j + 1


def class_char(ch: str) -> str:
    return "\\" + ch if ch in "\\]^-[&~|" else ch


def build_regex(tokens: list[tuple[str, str]], leading: str) -> str:
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
                groups[-1][-1].append(["(" + join_alternatives(inner) + ")", False])
        elif kind == "alt":
            groups[-1].append([])
    if len(groups) > 1:
        raise ValueError("unmatched (")
    return join_alternatives(groups[0])


def join_alternatives(alternatives: list[list[list]]) -> str:
    return "|".join("".join(atom[0] for atom in alt) for alt in alternatives)


def bracket_trick(pattern: str) -> str | None:
    """`train.py` -> `[t]rain.py`: same matches, but the text no longer matches itself."""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
        elif c == "[":
            try:
                i = bracket_expression(pattern, i)[1]
            except ValueError:
                return None
        elif c in "^$.*+?(){}|":
            i += 1
        else:
            return pattern[:i] + "[" + c + "]" + pattern[i + 1:]
    return None
