"""An attempt's facts as history, compare and a watch's baseline rules read them: when it ran,
how it ended, how far and how fast it got (its section of the log, parsed by
logmetrics.parse_line), and two attempts' series side by side at the steps both reached."""

import time

from ..core import launchers
from ..logmetrics import is_loss, parse_line, throughput_metric
from ..logmetrics.rules import median
from ..core.logselect import forwards, section
from ..core.secrets import mask_url_passwords

SECTION_MAX = 16 << 20  # bytes of one attempt's log parsed at most: a reply stays quick
WARMUP_FRACTION = 0.1  # the first tenth of an attempt's throughput points is warm-up...
WARMUP_MIN = 2  # ... and at least this many (compilation, autotuning, data loader start)
MIN_POINTS = 3  # fewer throughput points than this on either side: no number, "too few points"
ROWS = 10  # steps shown side by side at most


def facts(store, att, state, series, metric=None):
    """One attempt's facts; series: its points too, [step, throughput, loss] (compare);
    metric: the throughput to read (a baseline rule's), else the main one."""
    ex = att.get("exit") or {}
    started, ended = att.get("started_at"), ex.get("at")
    row = {"attempt": att.get("attempt"), "state": state, "started_at": started, "exit": att.get("exit"),
           "ran_s": round((ended or time.time()) - started, 1) if started and (ended or state == "running") else None,
           "command": command(att), "cwd": att.get("cwd"), "files": short_hashes(att.get("hashes"))}
    if att.get("error"):
        row["error"] = att["error"]
    extra(row, att)
    row.update(metrics(store, att, series, metric))
    return row


def extra(row, att):
    """What only some attempts have: a supervised restart's cause (the shim started it, with
    the files as they were on disk then), an engine's job (its launcher's row), a node's rank."""
    r = att.get("restart")
    if r:
        row["restart"] = {"of": r.get("of"), "number": r.get("number"), "reason": r.get("reason"),
                          "delay_s": r.get("delay_s"), "by": "shim"}
    launcher = launchers.named(att)
    if launcher is not None:
        row[launcher] = launchers.queries(launcher).history_row(att)
    mn = att.get("multinode")
    if mn:
        row["node"] = {"rank": mn.get("rank"), "nnodes": mn.get("nnodes")}


def command(att):
    """The attempt's command as shown: a URL's password in it as *** (secrets.mask_url_passwords)."""
    return mask_url_passwords(att["sh"] if att.get("sh") is not None else " ".join(att.get("argv") or []))


def short_hashes(hashes):
    return {p: (h or "")[:8] or None for p, h in sorted((hashes or {}).items())}


def metrics(store, att, series, metric=None):
    """steps reached, the main throughput (its name, median after warm-up, the points it
    had), the last loss; a section longer than SECTION_MAX is parsed at its head and its tail
    (parsed_lines), so the last step and loss are its true last ones, and "log_partial" (the
    bytes parsed) with "log_bytes" (the section's size) say the median stands on those two."""
    if not att.get("log"):
        return {"steps": None, "throughput": None, "loss": None}
    lo, hi = section(store, att)
    pts, names = [], set()
    partial = hi - lo > SECTION_MAX
    for line in parsed_lines(att["log"], lo, hi):
        if not any(c.isdigit() for c in line):
            continue
        m = parse_line(line)
        if m:
            pts.append(m)
            names.update(m)
    out = summarize(pts, names, partial, series, metric)
    if partial:
        out["log_bytes"] = hi - lo
    return out


def parsed_lines(path, lo, hi):
    """The lines of [lo, hi) that are parsed: all of them up to SECTION_MAX bytes, else the
    whole lines of its first and last SECTION_MAX/2 bytes (a line cut at either seam is left out)."""
    if hi - lo <= SECTION_MAX:
        yield from forwards(path, lo, hi)
        return
    half = SECTION_MAX // 2
    held = None
    for line in forwards(path, lo, lo + half):
        if held is not None:
            yield held
        held = line
    tail = forwards(path, hi - half, hi)
    next(tail, None)
    yield from tail


def summarize(pts, names, partial, series, metric=None):
    tp = metric or throughput_metric(n for n in names if not n.startswith("lr"))
    loss = next((n for n in ("loss", "train_loss", "lm_loss") if n in names), None) or next(
        (n for n in sorted(names) if is_loss(n)), None)
    step_name = next((n for n in ("step", "global_step", "iter", "iteration", "num_updates") if n in names), None)
    steps = [p[step_name] for p in pts if step_name in p] if step_name else []
    tps = [p[tp] for p in pts if tp in p and p[tp] == p[tp]] if tp else []
    losses = [p[loss] for p in pts if loss in p] if loss else []
    warm = max(WARMUP_MIN, int(len(tps) * WARMUP_FRACTION))
    out = {"steps": int(max(steps)) if steps else None,
           "throughput": {"metric": tp, "median": median(tps[warm:]), "points": len(tps) - warm,
                          "warmup_points": warm} if len(tps) > warm else
           ({"metric": tp, "median": None, "points": 0, "warmup_points": len(tps)} if tp else None),
           "loss": {"metric": loss, "last": _num(losses[-1])} if losses else None}
    if partial:
        out["log_partial"] = SECTION_MAX
    if series:
        out["series"] = {"step": step_name, "throughput": tp, "loss": loss, "warmup_points": warm,
                         "points": [[p.get(step_name), p.get(tp), _num(p.get(loss))] for p in pts
                                    if step_name in p and (tp in p or loss in p)]}
    return out


def _num(v):
    """A number as JSON can carry it: NaN and inf as strings."""
    if v is None or v == v and v not in (float("inf"), float("-inf")):
        return v
    return str(v)


def side_by_side(sa, sb):
    """{"metric", "steps": [lo, hi], "rows", "throughput": [a, b], "loss": {...}, "verdict"}."""
    tp = sa["throughput"] if sa["throughput"] == sb["throughput"] else None
    pa, pb = _by_step(sa), _by_step(sb)
    # comparable steps: those both reached, each side past its warm-up
    lo = max(_after_warmup(sa), _after_warmup(sb))
    hi = min(max(pa) if pa else -1, max(pb) if pb else -1)
    common = sorted(s for s in pa if s in pb and lo <= s <= hi)
    out = {"metric": tp, "steps": [_n(common[0]), _n(common[-1])] if common else None}
    every = max(1, -(-len(common) // ROWS))
    out["rows"] = [[_n(s), pa[s][0], pb[s][0], pa[s][1], pb[s][1]] for s in common[::every]]
    ta = [pa[s][0] for s in common if pa[s][0] is not None]
    tb = [pb[s][0] for s in common if pb[s][0] is not None]
    words = []
    if tp is None:
        words.append("no throughput metric both attempts print" if (sa["throughput"] or sb["throughput"])
                     else "no throughput in either log")
    elif min(len(ta), len(tb)) < MIN_POINTS:
        words.append("%s: too few points at common steps (%d and %d; %d needed)" % (tp, len(ta), len(tb), MIN_POINTS))
    else:
        ma, mb = median(ta), median(tb)
        out["throughput"] = [ma, mb]
        words.append("%s %s -> %s (%s) over steps %s-%s" % (tp, si(ma), si(mb), pct(ma, mb), _n(lo), _n(hi)))
    losses = [s for s in common if pa[s][1] is not None and pb[s][1] is not None]
    if losses:
        s = losses[-1]
        out["loss"] = {"metric": sa["loss"], "step": s, "a": pa[s][1], "b": pb[s][1]}
        words.append("loss at step %s %s -> %s" % (_n(s), pa[s][1], pb[s][1]))
    out["verdict"] = "; ".join(words)
    return out


def _by_step(series):
    """{step: (throughput, loss)}: the last line that gave a step wins (a re-printed step)."""
    return {p[0]: (p[1], p[2]) for p in series["points"] if p[0] is not None}


def _after_warmup(series):
    """The first step past the warm-up points (ledger.WARMUP_*) of the throughput."""
    seen = 0
    for step, tp, _ in series["points"]:
        if tp is not None and step is not None:
            seen += 1
            if seen > series["warmup_points"]:
                return step
    return float("inf")


def _n(v):
    return int(v) if v == int(v) else v


def pct(a, b):
    return "%+.1f%%" % ((b - a) / a * 100.0) if a else "n/a"


def si(v):
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= div:
            return ("%.2f" % (v / div)).rstrip("0").rstrip(".") + suffix
    return "%.4g" % v
