"""gitignore patterns, matched with the stdlib (the base install stays light).

What git does (gitignore(5)), and what this does: blank lines and `#` lines are skipped; `!`
negates; a trailing `/` matches directories only; a pattern with a `/` anywhere but at its
end is anchored to the directory of the file it came from, one without matches a name at any
depth below it; `*` and `?` never match `/`, `[...]` is a class, `**/`, `/**` and `/**/`
match any number of directories; the last matching pattern wins; a file under an excluded
directory stays excluded (the walk never enters it), whatever a later `!` says.
"""

from __future__ import annotations

import os
import re

FILES = (".gitignore", ".runwardignore")  # read in every pushed directory, by default


class Rule:
    __slots__ = ("base", "regex", "negate", "dir_only", "text")

    def __init__(self, base: str, pattern: str):
        self.text = pattern
        self.negate = pattern.startswith("!")
        if self.negate:
            pattern = pattern[1:]
        elif pattern.startswith("\\!") or pattern.startswith("\\#"):
            pattern = pattern[1:]
        self.dir_only = pattern.endswith("/")
        pattern = pattern.rstrip("/")
        anchored = "/" in pattern
        body = _translate(pattern.lstrip("/"))
        self.regex = re.compile(("^" if anchored else "^(?:.*/)?") + body + "$", re.S)
        self.base = base

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.base:
            if not rel.startswith(self.base + "/"):
                return False
            rel = rel[len(self.base) + 1:]
        return bool(self.regex.match(rel))


def _translate(pat: str) -> str:
    out, i, n = [], 0, len(pat)
    while i < n:
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif pat[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pat[i] == "?":
            out.append("[^/]")
            i += 1
        elif pat[i] == "[" and "]" in pat[i + 2:]:
            j = pat.index("]", i + 2)
            cls = pat[i + 1:j].replace("\\", "\\\\")
            out.append("[" + ("^" + cls[1:] if cls[:1] in "!^" and cls else cls) + "]")
            i = j + 1
        elif pat[i] == "\\" and i + 1 < n:
            out.append(re.escape(pat[i + 1]))
            i += 2
        else:
            out.append(re.escape(pat[i]))
            i += 1
    return "".join(out)


def parse(text: str, base: str = "") -> list[Rule]:
    rules = []
    for line in text.splitlines():
        if line.endswith(" ") and not line.endswith("\\ "):
            line = line.rstrip(" ")
        if not line or line.startswith("#"):
            continue
        rules.append(Rule(base, line))
    return rules


class Matcher:
    """The rules in force while walking one tree: --exclude patterns (anchored at its root)
    and, by default, each directory's .gitignore and .runwardignore, added as the walk
    enters it."""

    def __init__(self, patterns: list[str] = (), read_files: bool = True):
        self.rules: list[Rule] = []
        for p in patterns:
            self.rules += parse(p)
        self.read_files = read_files

    def enter(self, root: str, rel: str) -> None:
        """Read the ignore files of the directory rel (under the tree root) as the walk
        enters it; they apply below it, after the ones read above (later wins)."""
        if not self.read_files:
            return
        for name in FILES:
            try:
                with open(os.path.join(root, rel, name), encoding="utf-8", errors="replace") as f:
                    self.rules += parse(f.read(), rel)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                pass

    def excluded(self, rel: str, is_dir: bool) -> bool:
        out = False
        for r in self.rules:
            if r.negate == out and r.matches(rel, is_dir):
                out = not r.negate
        return out

    def excluded_path(self, rel: str, is_dir: bool) -> bool:
        """excluded, or under an excluded directory (for what is found on the far side)."""
        parts = rel.split("/")
        for k in range(1, len(parts)):
            if self.excluded("/".join(parts[:k]), True):
                return True
        return self.excluded(rel, is_dir)
