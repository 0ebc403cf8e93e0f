"""Training health read from a log file: metrics per line, alerts, incremental from an offset.

This file is written to be moved verbatim into the agent (src/runward/agent.py), which is
shipped to the target on every call: stdlib only, Python >= 3.8, every top-level name
prefixed `lm_`/`Lm` (constants `LM_`) so none collides with the agent's own, and no work at
import beyond compiling regexes.

One entry point, `lm_scan(log_path, state, rules, now)`: parse only the bytes written since
the last call (the offset lives in `state`, which the caller keeps and hands back) and answer
with the points (metrics per line), the alerts and the new state.

How a line becomes metrics. Every number in a line is a slot, named after the text just
before it: `loss=2.31`, `loss: 2.31`, `loss 2.31`, `'loss': 2.31`, `"loss": "2.31"`,
`lm loss: 2.3E+00 |` (lm_analyse). Lines that one program prints share a skeleton, the line
with its digits deleted; the naming is worked out once per skeleton and kept as a template: a
regex of the line with every digit run as `\\d+` whose groups are the named numbers. A line
then costs a `bytes.translate`, a dict look-up and one `fullmatch`, all in C, on the raw bytes
(never decoded). Only the values that rules look at (loss for NaN, the throughput) are
converted per line; the dicts of the points returned are built for the last `max_points` only.
"""
import calendar
import collections
import math
import os
import re
import time

LM_VERSION = 1
LM_CHUNK = 1 << 20  # bytes per read
LM_MAX_BYTES = 64 << 20  # default cap on bytes parsed per call (rules["max_bytes"])
LM_CARRY_MAX = 64 << 10  # a line longer than this is cut there; the rest of it is skipped
LM_LINE_MAX = 500  # characters of a line kept in an alert
LM_MAX_POINTS = 2000
LM_TEMPLATE_CACHE = 4096
LM_MAX_TRACKED = 64  # metrics whose early median is kept in the state
LM_TB_MAX_LINES = 400  # a traceback whose exception line has not come after this many lines
LM_MAX_TRACEBACKS = 16  # tracebacks in progress at once (one per rank prefix)
LM_SIG_BYTES = 64  # bytes before the offset remembered to notice a log rewritten in place
LM_DIGITS = b"0123456789"

# A number: 14512, 14,512, 2.31, .5, 1.5E-04, -3, nan, NaN, inf, -inf, Infinity. Not one
# glued to a word (acc1, fp16, E0321, v1.2): those stay part of the surrounding text. Nor a
# "nan" that more words and a colon follow: Megatron's "number of nan iterations:   0".
LM_NUM_PAT = (
    r"(?<![\w.])("
    r"[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?"
    r"|[-+]?\.\d+(?:[eE][-+]?\d+)?"
    r"|[-+]?(?:[nN][aA][nN]|[iI][nN][fF](?:inity)?)(?!\w)(?![ \t]+[A-Za-z][A-Za-z_ ]*[:=])"
    r")"
)
LM_NUM_RE = re.compile(LM_NUM_PAT, re.ASCII)
LM_NUM_RE_B = re.compile(LM_NUM_PAT.encode())
LM_NAN_INF_RE_B = re.compile(rb"(?i)nan|inf")
# A NaN or Inf value leaves its letters in a line's skeleton: without this, none can be there.
# (A value token has no word character after it, so "INFO" is no such word.)
LM_NAN_WORD_RE_B = re.compile(rb"(?i)(?<![a-z_])(?:nan|inf(?:inity)?)(?![a-z_])")
# The name before a number: the longest run of name characters that ends the gap, then an
# optional `=` or `:` and an opening quote or bracket. `,` `|` `;` `:` `=` end a name.
LM_NAME_TAIL_RE = re.compile(
    r"(?<![A-Za-z0-9_])([A-Za-z_](?:[A-Za-z0-9_ /.%()#\-]*?[A-Za-z0-9_)%#])?)"
    r"['\"]?\s*(?:[=:]\s*)?['\"]?\[*\s*$"
)
LM_UNIT_GLUED_RE = re.compile(r"^[A-Za-z%/]+")
LM_SUFFIX_RE = re.compile(r"^([kKMGT])(?:i?B)?(?![A-Za-z0-9])")
LM_SUFFIX = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
LM_RATE_UNIT_RE = re.compile(r"^ ?([A-Za-z]*/[A-Za-z]+)(?![A-Za-z])")
LM_SOURCE_RE = re.compile(r"\.(?:py|c|cc|cpp|cu|h|hpp|rs|go)$")
LM_NORM_RE = re.compile(r"[^a-z0-9]+")
LM_DIGIT_RUN_B = re.compile(rb"\d+")
# What comes before the message on a log line and is not data: timestamps, [bracketed]
# headers ([INFO], [rank0]:, [logging.py:69:log_dist]), (APIServer pid=1), glog headers
# (E0321 02:07:08.408271257 123 ProcessGroupNCCL.cpp:607]), vLLM's `INFO 03-18 09:04:46`.
LM_PREFIX_RE = re.compile(
    r"^(?:\s*(?:"
    r"\[[^\]\n]{0,120}\]:?"
    r"|\([A-Za-z][^)\n]{0,80}\)"
    r"|\d{4}[-/]\d\d[-/]\d\d(?:[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?"
    r"|\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+(?: +\d+)? [\w./-]+:\d+\]"
    r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b:?"
    r"|[\w./-]+\.(?:py|cc|cpp|h|hpp):\d+(?::\w+)?\]"
    r"|>>|\||-|:"
    r")\s*)+"
)
# Where a log header starts inside a line (after a progress bar that had no newline).
LM_HEADER_START_RE_B = re.compile(rb"\[(?:rank\d+\]|[EWIF]\d{4} |[EWIF] )")
# A timestamp that starts the line: ISO 8601, `[2024-05-01 12:00:00,123]`, vLLM `INFO 03-18 ...`;
# also after one logger header (`[INFO|trainer.py:398] 2021-01-15 10:28:50,371 >> ...`).
LM_TS_RE = re.compile(
    r"(?:\[[A-Za-z][^\]\n]{0,60}\] ?|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL):? )?"
    r"\[?(\d{4})[-/](\d\d)[-/](\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d\d:?\d\d)?\]?"
)
LM_TS_MD_RE = re.compile(r"(?:INFO|WARNING|ERROR|DEBUG) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")

# Lines that are events, found over a whole chunk at once (they are rare; the scan is C).
# Texts checked against real logs: PyTorch's caching allocator ("torch.OutOfMemoryError:
# CUDA out of memory. Tried to allocate ..."; before 2.5 "torch.cuda.OutOfMemoryError", before
# 1.13 "RuntimeError: CUDA out of memory"), the CUDA runtime ("CUDA error: out of memory",
# cudaErrorMemoryAllocation), the driver API (CUDA_ERROR_OUT_OF_MEMORY), cuBLAS handle creation
# ("CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), ROCm ("HIP out of
# memory"), XLA ("RESOURCE_EXHAUSTED: Out of memory"); ProcessGroupNCCL ("Watchdog caught
# collective operation timeout: WorkNCCL(...)", "watchdog got stuck", "NCCL error in: ...",
# DistBackendError, ncclInternalError/ncclSystemError/...), NCCL_DEBUG=WARN output ("NCCL WARN
# NET/IB : Got completion ..."); the shell's "Killed" after the kernel OOM killer sent SIGKILL
# (or its zh_CN "已杀死"), and torchrun's "exitcode  : -9" / "Signal 9 (SIGKILL) received by PID".
# Triton's "OutOfResources: out of resource: shared memory" during autotuning is not one: the
# autotuner skips that config and goes on.
LM_EVENT_RE = re.compile(
    "(?P<traceback>Traceback \\(most recent call last\\):)"
    "|(?P<cuda_oom>CUDA out of memory|CUDA error: out of memory|HIP out of memory"
    "|CUBLAS_STATUS_ALLOC_FAILED|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
    "|RESOURCE_EXHAUSTED: Out of memory)"
    "|(?P<nccl>NCCL WARN|NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError"
    "|ncclRemoteError|ncclInvalidUsage|ncclInvalidArgument|DistBackendError"
    "|Watchdog caught collective operation timeout|watchdog got stuck"
    "|NCCL communicator was aborted|Some NCCL operations have failed or timed out)"
    "|(?P<oom_killed>^[ \\t]*(?:Killed|\u5df2\u6740\u6b7b)[ \\t\\r]*$|: line \\d+: +\\d+ Killed "
    "|Signal 9 \\(SIGKILL\\) received by PID|exitcode *: -9\\b|\\(exitcode: -9\\))"
    .encode("utf-8"),
    re.M,
)
LM_EVENT_HINTS = tuple(s.encode("utf-8") for s in (
    "Traceback", "memory", "MEMORY", "ALLOC_FAILED", "NCCL", "nccl", "Killed", "SIGKILL",
    "exitcode", "\u5df2\u6740\u6b7b"))  # every event pattern holds one: checked in C first
LM_TB_HEAD = "Traceback (most recent call last):"
LM_TB_CHAIN = ("During handling of the above exception", "The above exception was the direct")
# A traceback's prefix, as a key: digits of times and counters vary line to line and are
# zeroed; those naming a rank or a process ("[rank3]:", "pid=4009") tell tracebacks apart.
LM_PREFIX_DIGITS_RE = re.compile(r"((?:[Rr]ank|pid)[ =:]?)?\d+")


def lm_prefix_key(prefix):
    return LM_PREFIX_DIGITS_RE.sub(lambda m: m.group(0) if m.group(1) else "0", prefix)


def lm_prefix_pattern(prefix):
    """A regex matching PREFIX with its zeroed digit runs of any length."""
    out, pos = [], 0
    for m in LM_PREFIX_DIGITS_RE.finditer(prefix):
        out.append(re.escape(prefix[pos:m.start()]))
        out.append(re.escape(m.group(0)) if m.group(1) else r"\d+")
        pos = m.end()
    out.append(re.escape(prefix[pos:]))
    return "".join(out)

LM_EVENT_DETAIL = {
    "cuda_oom": "CUDA out of memory",
    "nccl": "NCCL error or collective timeout",
    "oom_killed": "killed by SIGKILL, most often the kernel OOM killer (the agent checks dmesg)",
    "traceback": "Python traceback",
}

# Throughput names, best first: the main one is the first class that has a match.
LM_THROUGHPUT_CLASSES = (
    re.compile(r"(^|_)(tok|toks|tokens?)(_per)?_s(ec(ond)?)?($|_)|(^|_)tgs($|_)|tokens?_?per_?sec"),
    re.compile(r"samples?_(per_)?s(ec(ond)?)?($|_)|samplespersec"),
    re.compile(r"(^|_)(wps|words_s|words_per_s(ec(ond)?)?)($|_)"),
    re.compile(r"throughput"),
    re.compile(r"(^|_)(it_s|ups|steps?_per_s(ec(ond)?)?)($|_)"),
    re.compile(r"(^|_)rate$"),
)
LM_NANCOUNT_RE = re.compile(r"(^|_)nan($|_)")
LM_R_LOSS, LM_R_NANCOUNT, LM_R_BOUND, LM_R_DROP, LM_R_PROGRESS = 1, 2, 4, 8, 16  # roles
LM_STEP_NAMES = frozenset(("step", "iter", "iteration", "global_step", "num_updates"))


# --------------------------------------------------------------------------- names


def lm_norm_name(name):
    """`tok/s` -> `tok_s`, `lm loss` -> `lm_loss`, `elapsed time (ms)` -> `elapsed_time_ms`."""
    return LM_NORM_RE.sub("_", name.lower()).strip("_")


def lm_is_loss(name):
    """Loss-like: the name says loss (but a loss *scale* is not a loss)."""
    return "loss" in name and "scale" not in name


def lm_throughput_class(name):
    """Index of the throughput class NAME falls in (0 best), or None if it is no throughput."""
    for i, rx in enumerate(LM_THROUGHPUT_CLASSES):
        if rx.search(name):
            return i
    return None


def lm_is_throughput(name):
    return lm_throughput_class(name) is not None


def lm_throughput_metric(names):
    """The main throughput metric among NAMES, or None.

    Tokens per second beat samples, words, anything called throughput, iterations and bare
    rates; among equals, a current value beats a running average, generation beats prompt
    (vLLM), then the shorter name.
    """
    best = None
    for n in names:
        c = lm_throughput_class(n)
        if c is None:
            continue
        key = (c, "prompt" in n, any(w in n for w in ("avg", "running", "mean")), len(n), n)
        if best is None or key < best[0]:
            best = (key, n)
    return best[1] if best else None


# --------------------------------------------------------------------------- one line


def lm_name_from_gap(gap, first):
    """The metric name that the text GAP (between two numbers) gives the number after it."""
    if not first:
        # A unit glued to the previous number ("123.45ms, mfu ", "5.42it/s, loss=") is not
        # the start of the next name.
        gap = LM_UNIT_GLUED_RE.sub("", gap, count=1)
    m = LM_NAME_TAIL_RE.search(gap)
    if not m:
        return None
    words = m.group(1).split()
    if not words:
        return None
    if len(words) > 5:  # prose: "saving checkpoint for the run at step 500" -> step
        words = words[-1:]
    name = " ".join(words)
    if LM_SOURCE_RE.search(name):
        return None  # "ib_plugin.c:1615", "metrics.py:481": a source location, not data
    name = lm_norm_name(name)
    if not name or len(name) > 64 or name[0].isdigit():
        return None
    return name


def lm_analyse(parts, prefix_end):
    """Name the numbers of one line. PARTS is LM_NUM_RE.split(line): text, number, text, ...

    Returns (index of the number, name, multiplier, inverse) for each named number.
    """
    if any("NCCL INFO" in p for p in parts[0::2]):
        return ()  # NCCL_DEBUG=INFO chatter: channels, ranks, ports; no training metric
    slots = []
    seen = set()
    pos = 0
    for i in range(len(parts) // 2):
        gap = parts[2 * i]
        pos += len(gap)
        start = pos
        pos += len(parts[2 * i + 1])
        if start < prefix_end:
            continue  # timestamps, [rank0], (pid=12), [file.py:69]: not data
        after = parts[2 * i + 2]
        name = lm_name_from_gap(gap, i == 0 or start <= prefix_end)
        inv = False
        if name is None:
            if after.startswith("%|"):
                name = "progress"  # tqdm: "45%|####  | 450/1000"
            else:
                m = LM_RATE_UNIT_RE.match(after)
                if m:
                    unit = m.group(1)
                    if unit == "s/it":  # tqdm flips to seconds per iteration when slow
                        name, inv = "it_s", True
                    elif unit.startswith("/"):
                        name = "rate"  # timm: "Time: 0.512s,  500.12/s"
                    else:
                        name = lm_norm_name(unit)
        if not name or name in seen:
            continue
        seen.add(name)
        m = LM_SUFFIX_RE.match(after)
        slots.append((i, name, LM_SUFFIX[m.group(1)] if m else 1.0, inv))
    return tuple(slots)


def lm_number(token, mult=1.0, inv=False):
    """The float a number token (str or bytes) stands for: separators, K/M/G, s/it."""
    if isinstance(token, bytes):
        v = float(token.replace(b",", b"") if b"," in token else token)
    else:
        v = float(token.replace(",", "") if "," in token else token)
    if mult != 1.0:
        v *= mult
    if inv:
        v = 1.0 / v if v else math.inf
    return v


def lm_prefix_end(line):
    m = LM_PREFIX_RE.match(line)
    return m.end() if m else 0


def lm_parse_line(line):
    """Metrics of one line as {name: float}, without configuration ({} when none).

    The reference for what lm_scan's templates extract; lm_scan's timestamp handling aside
    (a leading timestamp is a prefix here, so it gives no metric either way).
    """
    parts = LM_NUM_RE.split(line)
    if len(parts) == 1:
        return {}
    return {name: lm_number(parts[2 * i + 1], mult, inv)
            for i, name, mult, inv in lm_analyse(parts, lm_prefix_end(line))}


def lm_value_of(raw):
    """A user regex's capture as a number (K/M/G suffix, separators), or None."""
    parts = LM_NUM_RE.split(raw.strip())
    if len(parts) < 3:
        return None
    m = LM_SUFFIX_RE.match(parts[2])
    return lm_number(parts[1], LM_SUFFIX[m.group(1)] if m else 1.0)


def lm_user_metrics(line, user):
    """Metrics from the user's named regexes (runward.toml), [(name, compiled regex)]: one
    group names the metric after the regex; named groups name it after themselves."""
    out = {}
    for name, rx in user:
        m = rx.search(line)
        if not m:
            continue
        groups = m.groupdict()
        if groups:
            for g, raw in groups.items():
                v = None if raw is None else lm_value_of(raw)
                if v is not None:
                    out[lm_norm_name(g)] = v
        elif m.groups() and m.group(1) is not None:
            v = lm_value_of(m.group(1))
            if v is not None:
                out[name] = v
    return out


def lm_unsep(token):
    """A number token with thousands separators (14,512) as a float."""
    return float(token.replace(b",", b""))


def lm_converter(mult, inv, comma):
    """The function turning one slot's token (bytes) into its float: `float` itself when
    the skeleton says the token is a plain number, which is nearly always."""
    if mult == 1.0 and not inv:
        return lm_unsep if comma else float
    return lambda token: lm_number(token, mult, inv)


class LmTemplate(object):
    """A line skeleton's regex and what its groups are."""

    __slots__ = ("match", "names", "convs", "ts", "checks", "progress", "event", "finite",
                 "losses", "lazy", "fast")

    def __init__(self, match, names, convs, ts, event=False):
        self.match = match  # compiled fullmatch over the raw line bytes
        self.names = names  # metric name of each group
        self.convs = convs  # converter of each group, or None when every one is `float`
        self.ts = ts  # the line starts with a timestamp the clock reads
        self.checks = ()  # (group, name, roles, converter, floor, ceiling): what rules read
        self.progress = False  # a metric that shows training going on (loss, step, tok/s)
        self.event = event  # lines of this skeleton were events (checked again per line)
        self.finite = False  # the skeleton has no nan/inf word: every value is finite
        self.losses = ()  # NaN keys of loss slots whose finite values need no check
        self.lazy = False  # finite and nothing to check: match only if kept as a point
        self.fast = False  # lazy and no event: the hot loop's first test

    def values(self, m):
        groups = m.groups()
        if self.convs is None:
            return dict(zip(self.names, map(float, groups)))
        return {name: conv(g) for name, g, conv in zip(self.names, groups, self.convs)}


def lm_template(line_b, line):
    """The template of raw line LINE_B (LINE decoded), or None if it is no event and names
    no number."""
    event = LM_EVENT_RE.search(line_b) is not None
    parts_b = LM_NUM_RE_B.split(line_b)
    parts = [p.decode("utf-8", "replace") for p in parts_b]
    slots = lm_analyse(parts, lm_prefix_end(line))
    if not slots:
        return LmTemplate(None, (), None, False, True) if event else None
    named = {}
    for gi, (i, name, mult, inv) in enumerate(slots):
        named[i] = gi
    pieces = []
    for j, p in enumerate(parts_b):
        rx = LM_DIGIT_RUN_B.sub(rb"\\d+", re.escape(p))
        if j % 2 and (j // 2) in named:
            rx = b"(" + rx + b")"
        pieces.append(rx)
    convs = tuple(lm_converter(mult, inv, b"," in parts_b[2 * i + 1])
                  for i, name, mult, inv in slots)
    if all(c is float for c in convs):
        convs = None
    ts = bool(LM_TS_RE.match(line) or LM_TS_MD_RE.match(line))
    tpl = LmTemplate(re.compile(b"".join(pieces), re.S).fullmatch,
                     tuple(s[1] for s in slots), convs, ts, event)
    tpl.finite = not LM_NAN_WORD_RE_B.search(line_b.translate(None, LM_DIGITS))
    return tpl


# --------------------------------------------------------------------------- time


class LmClock(object):
    """Line timestamps to epoch seconds; the date part of each is converted once."""

    def __init__(self, now):
        self.now = now
        self.year = time.localtime(now).tm_year
        self.hours = {}

    def parse(self, line):
        """(epoch seconds or None, end of the timestamp in LINE)."""
        m = LM_TS_RE.match(line)
        if m:
            y, mo, d, h, mi, s, frac, tz = m.groups()
            key = (y, mo, d, h, tz)
            base = self.hours.get(key)
            if base is None:
                try:
                    base = self._hour(int(y), int(mo), int(d), int(h), tz)
                except (ValueError, OverflowError):
                    return None, 0
                self.hours[key] = base
            t = base + int(mi) * 60 + int(s)
            if frac:
                t += int(frac) / (10.0 ** len(frac))
            return t, m.end()
        m = LM_TS_MD_RE.match(line)
        if m:
            mo, d, h, mi, s = (int(x) for x in m.groups())
            try:
                t = self._hour(self.year, mo, d, h, None) + mi * 60 + s
                if t > self.now + 86400:  # no year in the log: December's lines in January
                    t = self._hour(self.year - 1, mo, d, h, None) + mi * 60 + s
            except (ValueError, OverflowError):
                return None, 0
            return t, 0
        return None, 0

    def of(self, line):
        """Time of LINE: its timestamp, else the time of this scan."""
        t = self.parse(line)[0]
        return self.now if t is None else t

    @staticmethod
    def _hour(y, mo, d, h, tz):
        if tz is None:  # the log's local time is the target's, where this code runs
            return time.mktime((y, mo, d, h, 0, 0, 0, 0, -1))
        t = calendar.timegm((y, mo, d, h, 0, 0, 0, 0, 0))
        if tz != "Z":
            sign = -1 if tz[0] == "+" else 1
            tz = tz[1:].replace(":", "")
            t += sign * (int(tz[:2]) * 3600 + int(tz[2:]) * 60)
        return t


# --------------------------------------------------------------------------- alerts


def lm_cut(line):
    return line if len(line) <= LM_LINE_MAX else line[: LM_LINE_MAX - 3] + "..."


def lm_json_value(v):
    """JSON has no NaN or Infinity: say them as strings so any parser reads the answer."""
    if isinstance(v, float) and (v != v or v in (math.inf, -math.inf)):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return v


def lm_alert(kind, t, detail, line_no=None, line=None, metric=None, value=None, **extra):
    a = {"kind": kind, "line_no": line_no, "line": None if line is None else lm_cut(line),
         "t": t, "metric": metric, "value": lm_json_value(value), "detail": detail}
    a.update(extra)
    return a


def lm_median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def lm_decode(b):
    return b.decode("utf-8", "replace")


# --------------------------------------------------------------------------- the scan


class LmScan(object):
    """One call of lm_scan: the state unpacked into attributes, the hot loop, the rules."""

    def __init__(self, state, rules, now):
        self.now = now
        self.rules = rules
        self.clock = LmClock(now)
        self.templates = {}  # line skeleton (digits deleted) -> LmTemplate or None
        self.plain = {}  # line without digits -> 0 nothing, 1 event, 2 a NaN/Inf maybe
        self.user = [(lm_norm_name(k), re.compile(v)) for k, v in
                     sorted((rules.get("metrics") or {}).items())]
        self.points = collections.deque(maxlen=max(0, int(rules.get("max_points",
                                                                    LM_MAX_POINTS))))
        self.npoints = 0
        self.alerts = []
        tail_n = min(int(rules.get("tail_lines") or 0), 1000)
        self.tail = collections.deque(maxlen=tail_n) if tail_n > 0 else None
        self.mins = {self._rule_name(k): float(v) for k, v in (rules.get("min") or {}).items()}
        self.maxs = {self._rule_name(k): float(v) for k, v in (rules.get("max") or {}).items()}
        self.drop_fraction = rules.get("drop_fraction", 0.5)
        self.drop_points = int(rules.get("drop_points") or 3)
        self.early_points = int(rules.get("early_points") or 10)
        dm = rules.get("drop_metrics")
        self.drop_metrics = None if dm is None else set(self._rule_name(k) for k in dm)

        self.lines = int(state.get("lines", 0))
        self.last_line = state.get("last_line", "")
        self.last_line_t = state.get("last_line_t")
        self.growth_t = state.get("growth_t")
        self.tbs = state.get("tbs") or {}  # prefix (digits as 0) -> traceback in progress
        self.prefix_rx = {}  # a traceback's prefix pattern -> compiled
        self.tracked = state.get("tracked") or {}  # name -> {"early", "med", "low", "hit"}
        self.violating = dict(state.get("violating") or {})  # "min:tok_s" -> points back OK
        self.quiet = state.get("quiet") or {}  # event kind -> line of its alert (a burst)
        self.names = set(state.get("names") or ())
        self.main_tp = lm_throughput_metric(self.names)
        self.roles = {}
        self.roles_dirty = False
        self.exit_seen = state.get("exit_seen")
        self.sigkill_seen = state.get("sigkill_seen", False)

    @staticmethod
    def _rule_name(k):
        return "throughput" if k == "throughput" else lm_norm_name(k)

    def state(self):
        return {"lines": self.lines, "last_line": self.last_line, "last_line_t": self.last_line_t,
                "growth_t": self.growth_t, "tbs": self.tbs, "tracked": self.tracked,
                "violating": self.violating, "quiet": self.quiet,
                "names": sorted(self.names)[:256], "exit_seen": self.exit_seen,
                "sigkill_seen": self.sigkill_seen}

    # ---------------------------------------------------------------- lines

    def feed(self, buf):
        """Parse BUF, raw bytes of complete lines, each ending with a newline."""
        lines = buf.split(b"\n")
        lines.pop()  # after the last newline: empty
        templates = self.templates
        get = templates.get
        append = self.points.append
        violating = self.violating  # these three are changed in place only
        tracked = self.tracked
        frac = self.drop_fraction
        tbs = self.tbs
        quiet = self.quiet  # cleared, never replaced
        user = self.user
        digits = LM_DIGITS
        slow = self._slow
        check = self._check
        kept = 0
        for n, seg in enumerate(lines, self.lines + 1):
            if tbs and self._pending(n, seg):
                continue  # a line of a traceback in progress
            if user or b"\r" in seg:
                self._line(n, seg)  # tqdm redraws, or the user's own regexes
                continue
            # What follows is _one() inlined: this loop is the hot path.
            key = seg.translate(None, digits)
            tpl = get(key)
            if tpl is not None and tpl.fast:
                # Nothing to check and every value finite (see LmTemplate): the line is
                # matched only if it is among the points kept, which most of a long scan
                # is not.
                append((n, seg, tpl, None))
                kept += 1
                if violating and tpl.losses:
                    for nan_key in tpl.losses:  # a finite loss ends a run of NaN
                        violating.pop(nan_key, None)
                if quiet and tpl.progress:
                    quiet.clear()  # training went on: the next error is a new burst
                continue
            if tpl is None:
                if key not in templates:
                    if len(key) == len(seg):  # no digit: an event, "loss: nan", or nothing
                        self._plain(n, seg)
                        continue
                    tpl = self._template(seg, key)
                if tpl is None:
                    continue  # numbers, but none named
            if tpl.event:  # this skeleton was an event line: is this one?
                if self._event_line(n, seg):
                    continue
                if tpl.match is None:
                    continue
            if violating and tpl.losses:
                for nan_key in tpl.losses:
                    violating.pop(nan_key, None)
            if tpl.lazy:
                append((n, seg, tpl, None))
                kept += 1
                if quiet and tpl.progress:
                    quiet.clear()
                continue
            m = tpl.match(seg)
            if m is None:  # same skeleton, other shape (".5" where "0.5" was)
                slow(n, seg)
                continue
            append((n, m, tpl, None))
            kept += 1
            if quiet and tpl.progress:
                quiet.clear()  # training went on: the next error is a new burst
            for g, name, role, conv, lo, hi in tpl.checks:
                v = conv(m.group(g))
                # All quiet, the usual case, decided here: a finite value within its limits,
                # no alert condition open, no NaN count, the drop rule's median known and
                # the value above its floor. Anything else goes to _check.
                if (v - v == 0.0 and lo <= v <= hi and not violating
                        and (not role & LM_R_NANCOUNT or v <= 0)):
                    if not role & LM_R_DROP:
                        continue
                    tr = tracked.get(name)
                    if (tr is not None and not tr["low"] and tr["med"] is not None
                            and v >= frac * tr["med"]):
                        continue
                check(n, seg, tpl.ts, name, v, role)
        self.npoints += kept
        self.lines += len(lines)
        last = lines[-1].rstrip(b"\r").rsplit(b"\r", 1)[-1] if lines else b""
        if last:  # the last line with text (a CRLF split by a read leaves an empty one)
            self.last_line = lm_decode(last)
            self.last_line_t = None  # worked out in finish(), for the last line only
        if lines:
            if self.tail is not None:
                self.tail.extend(lines[-self.tail.maxlen:])

    def feed_redraws(self, part):
        """PART: finished carriage-return segments of the line still being written."""
        if part.strip(b"\r"):
            self._line(self.lines + 1, part)
            self.last_line = lm_decode(part.rstrip(b"\r").rsplit(b"\r", 1)[-1])
            self.last_line_t = None

    def _plain(self, n, seg):
        """A line without a digit. Most repeat ("Saving checkpoint..."), so what each is, an
        event, a NaN or nothing, is remembered (bounded)."""
        what = self.plain.get(seg)
        if what is None:
            if len(self.plain) >= LM_TEMPLATE_CACHE:
                self.plain.clear()
            what = self.plain[seg] = (
                1 if LM_EVENT_RE.search(seg) else 2 if LM_NAN_INF_RE_B.search(seg) else 0)
        if what == 1:
            self._event_line(n, seg)
        elif what == 2:
            self._slow(n, seg)

    def _event_line(self, n, seg):
        """If SEG is an event line, handle it (metrics before it first) and say True."""
        m = LM_EVENT_RE.search(seg)
        if m is None:
            return False
        start = m.start()
        if start > 0:
            # Training output and an error on one physical line (a progress bar without its
            # newline, then the watchdog's message): its metrics come first.
            head = seg[:start]
            h = LM_HEADER_START_RE_B.search(head)
            self._line(n, head[:h.start()] if h else head)
        self._special(n, lm_decode(seg).rstrip("\r"), m.lastgroup)
        return True

    def _pending(self, n, seg):
        """A line while tracebacks are in progress: True when it is used up."""
        m = LM_EVENT_RE.search(seg)
        if m is not None:
            return self._event_line(n, seg)
        return self._special(n, lm_decode(seg).rstrip("\r"), None)

    def _template(self, seg, key):
        if len(self.templates) >= LM_TEMPLATE_CACHE:
            self.templates.clear()
        tpl = lm_template(seg, lm_decode(seg))
        self.templates[key] = tpl
        if tpl is not None:
            for name in tpl.names:
                self._role(name)
            self._checks_of(tpl)
            self._refresh_roles()
        return tpl

    def _checks_of(self, tpl):
        checks = []
        losses = []
        progress = False
        for gi, name in enumerate(tpl.names):
            role = self.roles.get(name)
            if role is None:
                role = self._role(name)
            if tpl.finite and role & ~LM_R_PROGRESS == LM_R_LOSS:
                losses.append("nan:" + name)  # finite by its skeleton: only a NaN run ends
                progress = True
                continue
            if role & ~LM_R_PROGRESS:
                conv = float if tpl.convs is None else tpl.convs[gi]
                rnames = (name, "throughput") if name == self.main_tp else (name,)
                los = [self.mins[r] for r in rnames if r in self.mins]
                his = [self.maxs[r] for r in rnames if r in self.maxs]
                checks.append((gi + 1, name, role & ~LM_R_PROGRESS, conv,
                               max(los) if los else -math.inf, min(his) if his else math.inf))
            progress = progress or bool(role & LM_R_PROGRESS)
        tpl.progress = progress
        tpl.checks = tuple(checks)
        tpl.losses = tuple(losses)
        tpl.lazy = tpl.finite and not checks and tpl.match is not None
        tpl.fast = tpl.lazy and not tpl.event

    def _refresh_roles(self):
        """The main throughput metric changed (a new name): every template's checks again."""
        while self.roles_dirty:
            self.roles_dirty = False
            for tpl in self.templates.values():
                if tpl is not None:
                    self._checks_of(tpl)

    def _line(self, n, raw):
        """A line by the general path: an event, or every carriage-return segment (tqdm
        redraws in place) for metrics."""
        if any([h in raw for h in LM_EVENT_HINTS]) and self._event_line(n, raw):
            return
        for seg in raw.split(b"\r"):
            if seg:
                if self.user:
                    self._slow(n, seg)
                else:
                    self._one(n, seg)

    def _one(self, n, seg):
        """Metrics of one line segment by its template (feed() has this inlined)."""
        key = seg.translate(None, LM_DIGITS)
        tpl = self.templates.get(key)
        if tpl is None:
            if key in self.templates:
                return
            if len(key) == len(seg):
                if LM_NAN_INF_RE_B.search(seg):
                    self._slow(n, seg)
                return
            tpl = self._template(seg, key)
            if tpl is None:
                return
        if tpl.match is None:
            return
        if self.violating and tpl.losses:
            for key in tpl.losses:
                self.violating.pop(key, None)
        m = tpl.match(seg)
        if m is None:
            self._slow(n, seg)
            return
        self.points.append((n, m, tpl, None))
        self.npoints += 1
        if self.quiet and tpl.progress:
            self.quiet.clear()
        for g, name, role, conv, lo, hi in tpl.checks:
            self._check(n, seg, tpl.ts, name, conv(m.group(g)), role)

    def _slow(self, n, seg):
        """Metrics of one segment without a template (and with the user's regexes)."""
        line = lm_decode(seg)
        t, tend = self.clock.parse(line)
        metrics = lm_parse_line(line[tend:]) if tend else lm_parse_line(line)
        if self.user:
            um = lm_user_metrics(line, self.user)
            if um:
                metrics.update(um)
        if not metrics:
            return
        t = self.now if t is None else t
        self.points.append((n, None, metrics, t))
        self.npoints += 1
        for name, v in metrics.items():
            role = self.roles.get(name)
            if role is None:
                role = self._role(name)
            if role & LM_R_PROGRESS and self.quiet:
                self.quiet.clear()
            if role & ~LM_R_PROGRESS:
                self._check(n, line, t, name, v, role)
        self._refresh_roles()

    def materialize(self):
        """The kept points as the JSON-able dicts lm_scan returns."""
        out = []
        for n, m, tpl, t in self.points:
            if m is None:
                metrics = tpl  # the slow path stored the dict itself
            else:
                if isinstance(m, bytes):  # a lazy line: matched only now
                    seg = m
                    m = tpl.match(seg)
                    if m is None:  # same skeleton, other shape: the general parser
                        line = lm_decode(seg)
                        t, tend = self.clock.parse(line)
                        metrics = lm_parse_line(line[tend:])
                        if metrics:
                            out.append({"line": n, "t": self.now if t is None else t,
                                        "metrics": {k: lm_json_value(v)
                                                    for k, v in metrics.items()}})
                        continue
                metrics = tpl.values(m)
                t = self.clock.of(lm_decode(m.string[:128])) if tpl.ts else self.now
            for k, v in metrics.items():
                if v != v or v in (math.inf, -math.inf):
                    metrics[k] = lm_json_value(v)
            out.append({"line": n, "t": t, "metrics": metrics})
        return out

    # ---------------------------------------------------------------- events

    def _special(self, n, line, kind):
        """Tracebacks in progress and event lines; True when LINE is used up by them."""
        if self.tbs and self._traceback_line(n, line, kind):
            return True
        if kind is None:
            return False
        t = self.clock.of(line)
        if kind == "traceback":
            i = line.find(LM_TB_HEAD)
            prefix = lm_prefix_key(line[:i])
            old = self.tbs.pop(prefix, None)
            if old is not None:  # a new traceback before this prefix's last one ended
                self._emit_traceback(old)
            if len(self.tbs) >= LM_MAX_TRACEBACKS:
                self._emit_traceback(self.tbs.pop(next(iter(self.tbs))))
            self.tbs[prefix] = {"line_no": n, "t": t, "prefix": prefix, "seen": 0,
                                "rx": lm_prefix_pattern(line[:i]),
                                "final": None, "final_no": None, "kind": None, "chain": False}
            return True
        self._event(kind, n, t, line)
        return True

    def _event(self, kind, n, t, line, **extra):
        # One failure prints the same message once per rank and per retry: report the first
        # line of a burst and count the rest, until a metric line shows training went on.
        first = self.quiet.get(kind)
        if first is not None:
            for a in reversed(self.alerts):
                if a["kind"] == kind and a["line_no"] == first:
                    a["repeats"] = a.get("repeats", 0) + 1
                    break
            return
        self.quiet[kind] = n
        detail = extra.pop("detail", None) or LM_EVENT_DETAIL[kind] + ": " + line.strip()[:200]
        if kind == "oom_killed":
            extra.setdefault("evidence", "log line: " + line.strip()[:120])
        self.alerts.append(lm_alert(kind, t, detail, n, line, **extra))

    def _traceback_line(self, n, line, kind):
        """Offer LINE to the tracebacks in progress; True when one of them takes it.

        A traceback is its header, indented frames, then one unindented exception line. The
        text before "Traceback" (`[rank1]: `, a logger header; digits aside) marks its lines
        when ranks interleave, so each prefix has its own traceback in progress. "During
        handling of the above exception..." chains the next traceback to it; the alert
        carries the last exception line, the one that ended the program.
        """
        taken = False
        for prefix, tb in list(self.tbs.items()):
            rx = self.prefix_rx.get(tb["rx"])
            if rx is None:
                rx = self.prefix_rx[tb["rx"]] = re.compile(tb["rx"])
            m = None if taken else rx.match(line)
            if m is None:
                self._traceback_stranger(tb)
                continue
            body = line[m.end():]
            if not body.strip():
                tb["seen"] += 1
                taken = True  # blank: inside a traceback, or before "During handling..."
            elif body.startswith(LM_TB_CHAIN):
                tb["chain"] = taken = True
            elif body.startswith(LM_TB_HEAD):
                if tb["chain"] or tb["final"] is None:
                    tb["chain"], tb["final"] = False, None
                    taken = True  # the next link of a chain
                else:
                    self._emit_traceback(self.tbs.pop(prefix))  # _special starts the new one
            elif tb["final"] is not None:
                self._emit_traceback(self.tbs.pop(prefix))
            elif body[:1] in " \t":
                tb["seen"] += 1
                taken = True  # a frame, its source line, carets
            else:
                # The exception line: "ValueError: ...", "torch.OutOfMemoryError: CUDA ...".
                tb["final"], tb["final_no"] = lm_cut(body.strip()), n
                if kind in ("cuda_oom", "nccl") and tb["kind"] is None:
                    tb["kind"] = kind
                taken = True
        return taken

    def _traceback_stranger(self, tb):
        """A line that is not TB's: the exception line is settled once one passes, and a
        traceback that never gets one is reported after LM_TB_MAX_LINES lines."""
        tb["seen"] += 1
        if tb["final"] is not None or tb["seen"] > LM_TB_MAX_LINES:
            self._emit_traceback(self.tbs.pop(tb["prefix"]))

    def _emit_traceback(self, tb):
        final = tb["final"]
        if final is None:
            detail = "Python traceback (its exception line has not appeared)"
            self._event("traceback", tb["line_no"], tb["t"], LM_TB_HEAD, detail=detail,
                        traceback_line_no=tb["line_no"])
            return
        kind = tb["kind"] or "traceback"
        what = "Python traceback" if kind == "traceback" else LM_EVENT_DETAIL[kind]
        detail = "%s: %s (traceback from line %d)" % (what, final, tb["line_no"])
        self._event(kind, tb["final_no"], tb["t"], final, detail=detail,
                    traceback_line_no=tb["line_no"])

    # ---------------------------------------------------------------- rules on points

    def _role(self, name):
        """Which rules look at metric NAME (bits LM_R_*); redone for every name when the
        main throughput metric changes."""
        if name not in self.names:
            self.names.add(name)
            if lm_is_throughput(name):
                main = lm_throughput_metric(self.names)
                if main != self.main_tp:
                    self.main_tp = main
                    self.roles = {}
                    self.roles_dirty = True
        is_main = name == self.main_tp
        role = 0
        if lm_is_loss(name) or lm_is_throughput(name) or name in LM_STEP_NAMES:
            role |= LM_R_PROGRESS
        if lm_is_loss(name):
            role |= LM_R_LOSS
        elif LM_NANCOUNT_RE.search(name):
            role |= LM_R_NANCOUNT
        if name in self.mins or name in self.maxs or (is_main and (
                "throughput" in self.mins or "throughput" in self.maxs)):
            role |= LM_R_BOUND
        if self.drop_fraction and (is_main if self.drop_metrics is None else (
                name in self.drop_metrics or (is_main and "throughput" in self.drop_metrics))):
            role |= LM_R_DROP
        self.roles[name] = role
        return role

    def _check(self, n, line, t, name, v, role):
        """Rules on one value. LINE is str or the raw bytes; T a time or, with raw bytes,
        whether the line has a timestamp (both are worked out only for an alert)."""
        if role & LM_R_LOSS:
            key = "nan:" + name
            if v != v or v == math.inf or v == -math.inf:
                if key not in self.violating:
                    self.violating[key] = 0
                    line, t = self._where(line, t)
                    what = "NaN" if v != v else "Inf"
                    self.alerts.append(lm_alert("nan" if v != v else "inf", t,
                                                "%s is %s" % (name, what), n, line, name, v))
            elif key in self.violating:
                del self.violating[key]
        elif role & LM_R_NANCOUNT:
            key = "nancount:" + name
            if v > 0:
                if key not in self.violating:  # Megatron: "number of nan iterations: 3"
                    self.violating[key] = 0
                    line, t = self._where(line, t)
                    self.alerts.append(lm_alert("nan", t, "%s = %g: the framework counts "
                                                "NaN steps" % (name, v), n, line, name, v))
            elif key in self.violating:
                del self.violating[key]
        if role & LM_R_BOUND:
            for rname in ((name, "throughput") if name == self.main_tp else (name,)):
                lo = self.mins.get(rname)
                if lo is not None:
                    self._bound("below_min", name, v, v < lo, lo, n, line, t)
                hi = self.maxs.get(rname)
                if hi is not None:
                    self._bound("above_max", name, v, v > hi, hi, n, line, t)
        if role & LM_R_DROP:
            self._drop(name, v, n, line, t)

    def _where(self, line, t):
        """(line text, time) for an alert, from what _check was given."""
        if isinstance(line, bytes):
            line = lm_decode(line)
            t = self.clock.of(line) if t else self.now
        return line, t

    def _bound(self, kind, name, v, bad, limit, n, line, t):
        # Alert when the value crosses the limit; again only after it was back within it for
        # drop_points values in a row (a value that hovers at the limit would alert each line).
        key = kind + ":" + name
        if bad:
            if key not in self.violating:
                line, t = self._where(line, t)
                word = "below the floor" if kind == "below_min" else "above the ceiling"
                self.alerts.append(lm_alert(kind, t, "%s = %g, %s %g" % (name, v, word, limit),
                                            n, line, name, v, limit=limit))
            self.violating[key] = 0
        elif v == v and key in self.violating:
            self.violating[key] += 1
            if self.violating[key] >= self.drop_points:
                del self.violating[key]

    def _drop(self, name, v, n, line, t):
        if v != v:
            return
        tr = self.tracked.get(name)
        if tr is None:
            if len(self.tracked) >= LM_MAX_TRACKED:
                return
            tr = self.tracked[name] = {"early": [], "med": None, "low": 0, "hit": False}
        if tr["med"] is None:
            tr["early"].append(v)
            if len(tr["early"]) >= self.early_points:
                tr["med"] = lm_median(tr["early"])
                tr["early"] = []
            return
        if v < self.drop_fraction * tr["med"]:
            tr["low"] += 1
            if tr["low"] >= self.drop_points and not tr["hit"]:
                tr["hit"] = True
                line, t = self._where(line, t)
                self.alerts.append(lm_alert(
                    "drop", t, "%s = %g for %d points in a row, below %g x its early median %g"
                    % (name, v, tr["low"], self.drop_fraction, tr["med"]), n, line, name, v,
                    median=tr["med"]))
        else:
            tr["low"] = 0
            tr["hit"] = False

    # ---------------------------------------------------------------- after the bytes

    def finish(self, alive, exit_info):
        # A traceback whose exception line is known is reported now, even if a chained one
        # might follow (that one then counts as a repeat); one still missing its exception
        # line waits for the next call, unless the job is gone and nothing more will come.
        for prefix, tb in list(self.tbs.items()):
            if tb["final"] is not None or not alive:
                self._emit_traceback(self.tbs.pop(prefix))
        if self.last_line and self.last_line_t is None:
            self.last_line_t = self.clock.of(self.last_line)
        stall = self.rules.get("stall_seconds")
        if alive and stall and self.growth_t is not None and self.now - self.growth_t > stall:
            quiet = self.now - self.growth_t
            self.alerts.append(lm_alert(
                "stall", self.now, "no new log output for %d s (stall limit %g s) while the job "
                "is alive" % (quiet, stall), value=round(quiet, 1), since=self.growth_t))
        if exit_info:
            code, sig = exit_info.get("code"), exit_info.get("signal")
            seen = [code, sig]
            if self.exit_seen != seen:
                self.exit_seen = seen
                if sig:
                    detail = "the job was killed by %s" % sig
                else:
                    detail = "the job exited with code %s" % code
                self.alerts.append(lm_alert("exited", self.now, detail, code=code, signal=sig))
            sigkill = (str(sig or "").upper().replace("SIG", "") in ("KILL", "9")
                       or code in (137, -9))
            if sigkill and not self.sigkill_seen:
                self.sigkill_seen = True
                self.alerts.append(lm_alert(
                    "oom_killed", self.now, "possibly OOM-killed: the job ended by SIGKILL (the "
                    "kernel OOM killer sends it; dmesg tells)", evidence="exit by SIGKILL",
                    certain=False))


def lm_scan(log_path, state, rules, now):
    """Parse what LOG_PATH gained since STATE (see the module docstring).

    Returns {"state", "points", "points_dropped", "alerts", "last_line", "lines", "bytes",
    "bytes_read", "more", "reset", "exists"}, and "tail" when rules["tail_lines"].
    """
    state = dict(state or {})
    rules = rules or {}
    scan = LmScan(state, rules, now)
    offset = int(state.get("offset", 0))
    carry = state.get("carry", "").encode("latin-1")
    skip_long = bool(state.get("skip_long", False))
    sig = state.get("sig", "")
    ident = (state.get("ino"), state.get("dev"))
    max_bytes = int(rules.get("max_bytes", LM_MAX_BYTES))
    reset = None
    read = 0
    more = False
    try:
        f = open(log_path, "rb")
    except FileNotFoundError:
        f = None
    if f is not None:
        with f:
            st = os.fstat(f.fileno())
            if ident[0] is not None and ident != (st.st_ino, st.st_dev):
                reset = "rotated"  # another file under the name (logrotate, re-created)
            elif st.st_size < offset:
                reset = "truncated"
            elif sig and offset:
                # Same file, not shorter: are the bytes before our offset still the ones we
                # read? (copytruncate, or `> log` and a rewrite, would pass the size test.)
                n = len(sig) // 2
                f.seek(offset - n)
                if f.read(n).hex() != sig:
                    reset = "rewritten"
            if reset:
                offset, carry, skip_long = 0, b"", False
                scan.lines, scan.last_line = 0, ""
                scan.tbs.clear()
                scan.quiet.clear()
            ident = (st.st_ino, st.st_dev)
            f.seek(offset)
            while read < max_bytes:
                data = f.read(min(LM_CHUNK, max_bytes - read))
                if not data:
                    break
                read += len(data)
                if skip_long:  # the rest of a line already cut at LM_CARRY_MAX
                    nl = data.find(b"\n")
                    if nl < 0:
                        continue
                    data = data[nl + 1:]
                    skip_long = False
                buf = carry + data if carry else data
                nl = buf.rfind(b"\n")
                if nl < 0:
                    carry = buf
                else:
                    carry = buf[nl + 1:]
                    scan.feed(buf[: nl + 1])
                cr = carry.rfind(b"\r")
                if cr >= 0:
                    # A progress bar redrawn in place (tqdm, Lightning) ends its line only
                    # when the epoch ends: its finished redraws are read now, not 64 KiB on.
                    scan.feed_redraws(carry[:cr])
                    carry = carry[cr + 1:]
                if len(carry) > LM_CARRY_MAX:
                    scan.feed(carry[:LM_CARRY_MAX] + b"\n")
                    carry, skip_long = b"", True
            offset += read
            end = os.fstat(f.fileno()).st_size
            more = offset < end
            if read:
                scan.growth_t = min(now, st.st_mtime)
            elif scan.growth_t is None and end:
                scan.growth_t = min(now, st.st_mtime)
            if offset:
                n = min(offset, LM_SIG_BYTES)
                f.seek(offset - n)
                sig = f.read(n).hex()
    scan.finish(bool(rules.get("alive")), rules.get("exit"))
    new_state = scan.state()
    new_state.update({"v": LM_VERSION, "offset": offset, "carry": carry.decode("latin-1"),
                      "skip_long": skip_long, "sig": sig, "ino": ident[0], "dev": ident[1]})
    points = scan.materialize()
    out = {"state": new_state, "points": points, "points_dropped": scan.npoints - len(points),
           "alerts": scan.alerts, "last_line": lm_cut(scan.last_line), "lines": scan.lines,
           "bytes": offset, "bytes_read": read, "more": more, "reset": reset,
           "exists": f is not None}
    if scan.tail is not None:
        out["tail"] = [lm_cut(lm_decode(x.rstrip(b"\r"))) for x in scan.tail]
    return out
