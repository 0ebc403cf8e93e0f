"""compare: two attempts of a run side by side -- what changed between them (files, env,
command, cwd; ledger.changes) and what it did: throughput and loss at the steps both reached,
with a one-line verdict. Worked out here, in one round trip: the env values and the log stay
on the target, only the comparison travels."""

from ..health.attempts import facts, side_by_side
from ..core.logselect import attempt_of
from ..core.snapshots import text_of
from ..core.store import RunStore
from .history import changes

DIFF_LINES = 400  # lines of one file's unified diff sent back at most

def compare(req, home):
    store = RunStore.existing(home, req.get("name"))
    a, b = _pair(store, req.get("a"), req.get("b"))
    fa, fb = (facts(store, att, "", True) for att in (a, b))
    sa, sb = fa.pop("series"), fb.pop("series")
    out = {"name": store.name, "a": a["attempt"], "b": b["attempt"], "changed": changes(a, b)}
    out["diffs"] = {p: file_diff(store, a, b, p) for p in out["changed"].get("files") or {}}
    for f in (fa, fb):
        f.pop("state", None)
    out["attempts"] = [fa, fb]
    out.update(side_by_side(sa, sb))
    return out


def file_diff(store, a, b, path):
    """{"diff", "truncated"}: the unified diff of PATH from attempt A's text to B's, when both
    were kept (snapshots.py); else {"why"}: which side's text is not there, and why."""
    texts = [text_of(store, att, path) for att in (a, b)]
    if None in texts:
        why = []
        for att, t in zip((a, b), texts):
            if t is None:
                had = ((att.get("snapshots") or {}).get("skipped") or {}).get(path)
                why.append("attempt %d: %s" % (att["attempt"], had or (
                    "no file" if path not in (att.get("hashes") or {}) or not att["hashes"][path]
                    else "its text was not kept (an older runward, or beyond the attempts kept)")))
        return {"why": "; ".join(why)}
    import difflib
    lines = list(difflib.unified_diff(texts[0].splitlines(True), texts[1].splitlines(True),
                                      "%s (attempt %d)" % (path, a["attempt"]), "%s (attempt %d)" % (path, b["attempt"])))
    return {"diff": "".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines[:DIFF_LINES]),
            "truncated": len(lines) > DIFF_LINES}


def _pair(store, a, b):
    """The two attempt records: A and B as asked, else the last two."""
    if a is None and b is None:
        have = store.attempts()
        if len(have) < 2:
            from ..core.wire import bad_input
            raise bad_input("run %s has %d attempt%s: nothing to compare" % (
                store.name, len(have), "" if len(have) == 1 else "s"),
                "restart it first, or name two attempts: `runward compare %s A B`" % store.name)
        a, b = have[-2], have[-1]
    return attempt_of(store, a), attempt_of(store, b)
