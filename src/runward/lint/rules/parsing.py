"""Parsing: a command line, or a string nested in it, that a shell cannot parse."""

from __future__ import annotations

from ..lexer import ParseError, Source
from ..report import RULES, Finding

WHY_PARSE = (
    "A shell refuses this line (`unexpected EOF while looking for matching ...`) and runs "
    "none of it, and lint cannot tell what it would do. For a nested string, the outer "
    "command runs and the inner shell fails, which from outside looks like `no output`.")
FIX_PARSE = (
    "close the quote. Hand-nested quoting is where this goes wrong: build an argv and quote "
    "once, e.g. `runward exec --on TARGET -- COMMAND ARG...`.")


def finding(src: Source, e: ParseError, nested: bool) -> Finding:
    """The parse-error finding, spanning from where the unclosed quote opens to the end."""
    start, _ = src.span(e.index, e.index + 1)
    end = src.span(0, len(src.text))[1] if src.text else start
    level = "a nested string" if nested else "the command line"
    message = f"cannot parse {level}: {e} (opened here)"
    return Finding("parse-error", RULES["parse-error"], start, max(end, start), message,
                   WHY_PARSE, FIX_PARSE)
