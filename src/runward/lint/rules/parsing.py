"""Parsing: a command line, or a string nested in it, that a shell cannot parse; words that
ssh joins into one string, which the remote shell splits again (ssh-word-split)."""

from __future__ import annotations

import re

from ..hops import ssh_words
from ..lexer import ParseError, Source, Word
from ..parse import join_words, parse
from ..report import RULES, Finding, always_quote, quote

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


# What the remote shell splits a word at, or reads as an operator, once ssh has joined it.
SPLITS = re.compile(r"[\s;&|<>()]")
# A word carrying its own quotes or backslashes was quoted for the remote shell on purpose.
QUOTED_FOR_REMOTE = re.compile(r"['\"\\]")

WHY_SSH_SPLIT = (
    "ssh sends one string, not an argv: it joins the words after the host with spaces, and "
    "the remote login shell parses that string again (ssh(1), \"the command is executed on the "
    "remote host instead of a login shell\"). A word that held a space, `;`, `&&` or `|` here is "
    "split there: `bash -lc 'cd /root/work; python3 train.py'` arrives as `bash -lc cd "
    "/root/work; python3 train.py`, so bash -lc runs a lone `cd` and `python3 train.py` runs in "
    "the host's own shell, outside the container, on the host's files. Checked over real ssh: "
    "the hostname printed is the host's.")


def ssh_word_split(words: list[Word]) -> Finding | None:
    """The ssh-word-split finding for `ssh HOST W1 W2...` where a word after the first holds
    what the remote shell splits at, or None."""
    parts = ssh_words(words)
    if parts is None or len(parts[2]) < 2:
        return None
    _, host, remote = parts
    split = [w for w in remote[1:] if SPLITS.search(w.value) and not QUOTED_FOR_REMOTE.search(w.value)]
    if not split:
        return None
    ran = _commands_of(join_words(remote).text)
    said = ", then ".join(f"`{c}`" for c in ran)
    message = (f"ssh joins the words after {host.value} into one string and its shell splits "
               f"`{split[0].value}` again: {host.value} runs {said}"
               + (f", the later ones in the login shell of {host.value} itself" if len(ran) > 1 else ""))
    return Finding("ssh-word-split", RULES["ssh-word-split"], split[0].start, split[-1].end, message,
                   WHY_SSH_SPLIT, _fix(words, host, remote))


def _commands_of(text: str) -> list[str]:
    """The commands a shell runs of TEXT, each as its words, for the message."""
    try:
        script = parse(Source(text, tuple(range(len(text)))))
    except ParseError:
        return [text]
    return [" | ".join(" ".join(quote(w.value) for w in c.words) for c in p.commands)
            for p in script.pipelines if p.commands] or [text]


def _fix(words: list[Word], host: Word, remote: list[Word]) -> str:
    """The same ssh with its remote command quoted once, as one word; and runward's exec."""
    inner = " ".join(quote(w.value) for w in remote)
    outer = always_quote(inner) if re.search(r'["$`\\!]', inner) else f'"{inner}"'
    local = " ".join(quote(w.value) for w in words[:len(words) - len(remote)])
    values = [w.value for w in remote]
    hop = f"/pct:{values[2]}" if values[:2] == ["pct", "exec"] and len(values) > 2 else ""
    return (f"quote the remote command once, as one word: `{local} {outer}`; or let runward quote "
            f"each hop: `runward exec --on ssh://{host.value}{hop} -- COMMAND ARG...`.")
