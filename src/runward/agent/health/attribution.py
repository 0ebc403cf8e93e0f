"""Failure attribution: which rank failed first (the root cause) and which failed because it
did (the cascade), read from a failed attempt's log and its exit.

When one rank of a distributed job dies, every other rank then fails too, loudly: NCCL's and
gloo's watchdog timeouts, "Connection reset by peer", aborted process groups, torchrun's
SIGTERM to the survivors, ChildFailedError. The first of these lines is rarely the cause. So
every failure signal is read with its rank (`[rank3]:` as PyTorch >= 2.2 prefixes a rank's
stderr, `[default3]:` as `torchrun --tee` does, `[Rank 3]` inside c10d's messages, torchrun's
`local_rank: 3`), its time where the line carries one, and whether it is an effect of another
rank's failure; the root is the first signal, in the log's order, that is not such an effect.
torchrun's own "Root Cause (first observed failure)" block is kept beside it as a second
witness (it orders by its error files' times, which exist only with @record).

Stdlib only; imported by status (named runs) and by the shim's gave_up notification only.
"""

import os
import re
import time

from ..logmetrics.clock import Clock
from ..logmetrics.kinds import KINDS
from ..logmetrics.patterns import EVENT_RE
from ..core.store import read_json, write_json
from .linesteps import RANK_PREFIX_RE

READ_BYTES = 4 << 20  # the tail of the attempt's log read: failures are at its end
MAX_SIGNALS = 24  # signals kept in the answer (the first ones)
VERSION = 1  # attribution.json's format

# A rank named inside the message: c10d's `[Rank 3]`, `[PG 0 (default_pg) Rank 3]`.
RANK_IN_RE = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]")
# glog headers (c10d's C++ and torchrun's own logging): `E1204 16:02:45.204000 26045 file:N]`,
# `[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607]` (month not zero-padded).
GLOG_RE = re.compile(r"^\[?([EWIF])(\d{3,4}) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?")
# torchrun: `failed (exitcode: 1) local_rank: 1 (pid: 26596) of binary: ...`
TORCHRUN_FAILED_RE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
# torchrun's ChildFailedError table: a `Failures:` or `Root Cause (first observed failure):`
# section of `[i]:` entries with `time : 2026-12-04_16:02:45`, `rank : 1 (local_rank: 1)`,
# `exitcode : -15 (pid: 26595)`.
BLOCK_FIELD_RE = re.compile(r"^\s+(time|host|rank|exitcode|traceback)\s*: (.*)$")
# An exception line ending a Python traceback: `RuntimeError: ...`, `torch.OutOfMemoryError: ...`
EXC_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure))(?::\s*(.*))?$")
XID_RE = re.compile(r"NVRM: Xid \([^)]*\): (\d+)")
# What a rank prints because ANOTHER rank failed: timeouts in a collective, a peer gone, a
# process group aborted, torchrun's SIGTERM to the survivors. (gloo: "Connection closed by
# peer ... typically caused by a remote worker crashing"; NCCL: ncclRemoteError.)
CASCADE = (
    ("timed out in the collective", re.compile(
        r"Watchdog caught collective operation timeout|Timed out waiting [\dms]+ for \w+ operation"
        r"|Some NCCL operations have failed or timed out|watchdog got stuck"
        r"|collective operation timeout|Timed out waiting for the|heartbeat monitor|timed out", re.I)),
    ("lost its peer", re.compile(
        r"Connection (?:closed|reset) by peer|Broken pipe|ncclRemoteError|remote worker crash"
        r"|Connection refused|DistNetworkError|peer closed", re.I)),
    ("aborted its process group", re.compile(
        r"communicator was aborted|NCCL communicator (?:was )?abort|process group.*abort"
        r"|ProcessGroupNCCL.*(?:Aborting|terminat)|Process group watchdog thread terminated", re.I)),
    ("was stopped by its launcher (SIGTERM)", re.compile(
        r"Signal 15 \(SIGTERM\)|exitcode\s*:?\s*-15\b|\(exitcode: -15\)|SignalException.*SIGTERM", re.I)),
)


def _event_root(body):
    """How the event BODY holds ranks as a root cause: (rank, kind, what) (logmetrics/kinds.py), or
    None where it holds none or one that never is."""
    m = EVENT_RE.search(body.encode("utf-8", "replace"))
    return KINDS[m.lastgroup].root if m else None


def _said(root, body):
    return root[1], root[2].format(line=body.strip()[:120])


def _root_kind(body):
    """(kind, what) of a line that may be a failure of its own rank, or None."""
    root = _event_root(body)
    if root and root[0] <= 1:
        return _said(root, body)
    x = XID_RE.search(body)
    if x:
        return "xid", "GPU Xid %s" % x.group(1)
    f = TORCHRUN_FAILED_RE.search(body)
    if f:
        return "exit", "exited with code %s" % f.group(1)
    e = EXC_RE.match(body)
    if e and e.group(1).endswith("ChildFailedError"):
        return None  # torchrun's summary of its ranks' failures: its table is read instead
    if e:
        msg = (e.group(2) or "").strip()
        return "exception", ("%s: %s" % (e.group(1), msg[:120])).rstrip(": ")
    if root:
        return _said(root, body)
    return None


def classify(body):
    """(kind, what, cascade) of a failure signal in BODY (a line without its rank prefix)."""
    for what, rx in CASCADE:
        if rx.search(body):
            root = _event_root(body)
            if root and root[0] == 0:  # an OOM that mentions a timeout is still an OOM
                return _said(root, body) + (False,)
            return "cascade", what, True
    k = _root_kind(body)
    return None if k is None else k + (False,)


class _Reader(object):
    """One pass over the log's lines: signals with rank and time, torchrun's tables."""

    def __init__(self, now):
        self.clock = Clock(now)
        self.year = time.localtime(now).tm_year
        self.signals = []
        self.block = None  # "failures" / "root" while inside torchrun's table
        self.entries = []  # torchrun's table entries: {"section", "time", "rank", ...}
        self.n_ranked = 0

    def time_of(self, body):
        t, _ = self.clock.parse(body)
        if t is not None:
            return t
        g = GLOG_RE.match(body)
        if not g:
            return None
        md, h, mi, s, frac = g.group(2), g.group(3), g.group(4), g.group(5), g.group(6)
        try:
            t = time.mktime((self.year, int(md[:-2]), int(md[-2:]), int(h), int(mi), int(s), 0, 0, -1))
        except (ValueError, OverflowError):
            return None
        return t + (int(frac) / 10.0 ** len(frac) if frac else 0)

    def line(self, n, line):
        body, rank, local = line.rstrip("\r\n"), None, False
        m = RANK_PREFIX_RE.match(body)
        while m:  # nested prefixes: the innermost names the rank
            rank, local = int(m.group(2)), m.group(1) != "rank"
            body = body[m.end():]
            m = RANK_PREFIX_RE.match(body)
        if rank is not None:
            self.n_ranked += 1
        if self._table(body) or body[:1] in (" ", "\t"):
            return  # an indented line: a traceback's frame or source line, never its exception
        hit = classify(body)
        if hit is None:
            return
        kind, what, cascade = hit
        if rank is None:
            r = RANK_IN_RE.search(body) or TORCHRUN_FAILED_RE.search(body)
            if r:
                rank, local = int(r.group(2 if r.re is TORCHRUN_FAILED_RE else 1)), r.re is TORCHRUN_FAILED_RE
        self.signals.append({"line_no": n, "rank": rank, "local_rank": local, "kind": kind,
                             "what": what, "cascade": cascade, "t": self.time_of(body),
                             "line": body.strip()[:300]})

    def _table(self, body):
        """torchrun's ChildFailedError table; True when BODY belongs to it."""
        s = body.strip()
        if s.startswith("Root Cause (first observed failure)"):
            self.block = "root"
            return True
        if s == "Failures:":
            self.block = "failures"
            return True
        if self.block is None:
            return False
        if s.startswith("=" * 8):
            self.block = None
            return True
        if re.match(r"^\[\d+\]:$", s):
            self.entries.append({"section": self.block})
            return True
        f = BLOCK_FIELD_RE.match(body)
        if f and self.entries:
            self.entries[-1][f.group(1)] = f.group(2).strip()
        return True


def _block_time(s):
    try:
        return time.mktime(time.strptime(s, "%Y-%m-%d_%H:%M:%S"))
    except (TypeError, ValueError, OverflowError):
        return None


def _first_observed(entries):
    """torchrun's Root Cause entry: its rank, exit code and time, or None."""
    for e in entries:
        if e.get("section") != "root":
            continue
        rank = re.match(r"(\d+)", e.get("rank") or "")
        code = re.match(r"(-?\d+)", e.get("exitcode") or "")
        return {"rank": int(rank.group(1)) if rank else None, "exitcode": int(code.group(1)) if code else None,
                "t": _block_time(e.get("time")), "host": e.get("host"), "traceback": e.get("traceback")}
    return None


def judge(signals, entries):
    """The root cause (the first signal, in the log's order, that is no effect of another
    rank's failure), the effects (every other rank's first signal after it) and torchrun's
    own account. Unknown stays unknown: no root when every signal is an effect."""
    first = _first_observed(entries)
    root = next((s for s in signals if not s["cascade"] and s["kind"] != "exit"), None)
    if root is None:  # only exits: a rank's exit code is the cause we know
        root = next((s for s in signals if not s["cascade"]), None)
    if root is not None and root["t"] is None and first and first["rank"] == root["rank"]:
        root = dict(root, t=first["t"], t_from="torchrun's record of that rank's failure")
    after = signals if root is None else [s for s in signals if s["line_no"] > root["line_no"]]
    effects, seen = [], {None if root is None else root["rank"]}
    for s in after:  # a line naming no rank (the launcher's, an abort) is no rank's effect
        if s["rank"] is not None and s["rank"] not in seen:
            seen.add(s["rank"])
            effects.append(s)
    out = {"root": root, "effects": effects, "first_observed": first, "signals": signals[:MAX_SIGNALS]}
    out["summary"] = summary(out)
    return out


def _who(rank, local, node=None):
    if rank is None:
        return "a rank not named in the log" if node is None else "node %d" % node
    who = ("local rank %d" if local else "rank %d") % rank
    return who if node is None else "%s (node %d)" % (who, node)


def _clock(t):
    return "" if t is None else " at " + time.strftime("%H:%M:%S", time.localtime(t))


def summary(res, node=None):
    """One sentence: "root cause: rank 2 (node 1) CUDA out of memory at 12:01:03; ranks 0,1,3
    then timed out in the collective (effects)"."""
    root, first = res.get("root"), res.get("first_observed")
    if root is not None:
        who = _who(root["rank"], root["local_rank"], node) if root["rank"] is not None or node is not None else None
        head = "root cause: %s%s%s" % ("" if who is None else who + " ", root["what"], _clock(root["t"]))
    elif res.get("effects"):
        e = res["effects"][0]
        head = ("no rank failed on its own in the log: the first signal is %s that %s%s "
                "(a hung rank? `runward stacks` while it runs)" % (_who(e["rank"], e["local_rank"], node),
                                                                 e["what"], _clock(e["t"])))
    elif first and first.get("rank") is not None:
        head = "root cause: rank %d exited with code %s (torchrun's first observed failure)" % (
            first["rank"], first.get("exitcode"))
    else:
        return None
    groups = {}
    for e in res.get("effects") or ():
        if e["rank"] is not None:
            groups.setdefault(e["what"] if e["cascade"] else "failed: " + e["what"], []).append(e)
    parts = []
    for what, es in groups.items():
        ranks = ",".join(str(e["rank"]) for e in sorted(es, key=lambda e: e["rank"]))
        parts.append("%s %s then %s" % ("rank" if len(es) == 1 else "ranks", ranks, what))
    if parts and root is not None:
        head += "; " + "; ".join(parts) + " (effects)"
    if root is not None and first and first.get("rank") is not None and root["rank"] not in (None, first["rank"]):
        head += "; torchrun's first observed failure is rank %d" % first["rank"]
    return head


def read_lines(path, start):
    """The attempt's part of the log from byte START, at most its last READ_BYTES, as
    (number of the first line, lines); the line numbers count from START."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            begin = max(start, size - READ_BYTES) if start <= size else max(0, size - READ_BYTES)
            f.seek(begin)
            data = f.read(size - begin)
    except OSError:
        return 1, []
    skipped = 0
    if begin > start:  # a cut line first: dropped, and the lines before it not counted
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else b""
        skipped = 1
    return 1 + skipped, data.decode("utf-8", "replace").splitlines()


def attribute_log(path, start=0, now=None):
    """Failure attribution of the log at PATH from byte START."""
    r = _Reader(time.time() if now is None else now)
    first, lines = read_lines(path, start)
    for i, ln in enumerate(lines):
        r.line(first + i, ln)
    return judge(r.signals, r.entries)


def failed(att):
    """Whether the attempt ended in a failure of its own: a non-zero exit or a signal that
    no stop asked for (a stop's TERM is no failure to attribute)."""
    ex = att.get("exit") or {}
    if att.get("stop_requested") or ex.get("unknown"):
        return False
    return bool(ex.get("signal")) or ex.get("code") not in (None, 0)


def for_attempt(store, att):
    """The attempt's attribution, computed once per log state and kept beside its records
    (attribution.json), so a repeated status reads it instead of the log."""
    log = att.get("log")
    try:
        st = os.stat(log)
    except (OSError, TypeError):
        return None
    key = [att.get("attempt"), st.st_size, st.st_mtime, VERSION]
    path = os.path.join(store.dir, "attribution.json")
    saved = read_json(path) or {}
    if saved.get("key") == key:
        return saved.get("attribution")
    res = attribute_log(log, int(att.get("log_offset") or 0))
    mn = att.get("multinode") or {}
    if mn.get("rank") is not None and int(mn.get("nnodes") or 1) > 1:
        res["node"] = int(mn["rank"])
        res["summary"] = summary(res, node=res["node"])
    try:
        write_json(path, {"key": key, "attribution": res})
    except OSError:
        pass  # a read-only home: said again next time, never wrong
    return res
