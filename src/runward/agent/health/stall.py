"""Stall and straggler: a live run that stopped working, and the rank that holds it back
(docs/diagnosis.md, "Stalls and stragglers").

- **stall**: the run's step (the last `step`/`iteration`/... its log printed) has not
  advanced for stall_after seconds while the job is alive. Before the first step, silence
  alone is not a stall: a model loading for minutes prints nothing and steps normally after.
  Then the log's silence counts only with the process tree's own stillness (basis "log"): no
  CPU and no I/O (/proc/PID/stat, /proc/PID/io) over stall_after is the hang before a first
  step (a rendezvous that never completes); a tree that computes or reads is starting, and
  status says "no step yet, 4m12s, loading?".
- **stall_after**: set (start --stall-after, [runs.NAME.health] stall_after), else derived from
  the observed step time, max(10 x median step time, 120 s), else 120 s until a step time is
  seen. The step time there is at least the time between two step lines: a log printing every
  100 iterations (Megatron's default) advances once per 100 steps, not once per step. And it
  is at least 3 x the median time between the log's writes that carried steps (the first
  counted from the attempt's start): a block-buffered log (print to a file, no -u) gains 100
  steps at once every few minutes and is healthy between two flushes. A step time is
  observed between two reads that both saw the step advance: (time between them) / (steps
  between them), so one read of a long log makes no false estimate.
- **straggler**: a rank (its `[rankN]:`/`[defaultN]:` lines, linesteps.RANK_PREFIX_RE) whose
  step stopped advancing for stall_after while another rank's went on; a rank whose processes
  (env RANK=N) used no CPU over stall_after while another rank's kept a core busy; a rank
  whose step time is straggler_ratio (default 3) times the other ranks' median.

The state (where the log was read to, each rank's step and when it advanced, CPU samples) is
kept beside the run's records (stall.json), so status, watch and the shim's health actions
share it; each call reads only what the log gained. Stdlib only.
"""

import os
import time

from .linesteps import RANK_PREFIX_RE, line_facts
from ..core.procfs import CLK_TCK, scan as scan_procs
from ..core.sidelock import side_lock
from .stackranks import COLLECTIVES, by_stacks as _by_stacks, name as _name, stack_ranks  # noqa: F401
from ..core.store import read_json, write_json

MIN_AFTER = 120.0  # the derived stall_after's floor
FACTOR = 10.0  # ... and its multiple of the median step time
WRITE_FACTOR = 3.0  # ... and of the median time between the log's writes that carried steps
RATIO = 3.0  # straggler_ratio's default
READ_BYTES = 4 << 20  # a call reads at most the newest 4 MiB the log gained
KEEP = 16  # step-time estimates kept (the run's and each rank's)
CPU_SAMPLES = 32
IDLE_CORE = 0.02  # a rank under 2% of a core is not computing
IDLE_IO = 16 << 10  # ... and a tree under 16 KiB/s of reads and writes (/proc/PID/io) is not loading
BUSY_CORE = 0.3  # ... while another over 30% of one is
VERSION = 1


def _fresh(att):
    return {"v": VERSION, "attempt": att.get("attempt"), "offset": int(att.get("log_offset") or 0),
            "lines": 0, "carry": "", "step": None, "step_t": None, "iv": [], "ranks": {}, "cpu": {},
            "growth_t": None, "episode": None}


def _load(store, att):
    st = read_json(os.path.join(store.dir, "stall.json")) or {}
    if st.get("attempt") != att.get("attempt") or st.get("v") != VERSION:
        return _fresh(att)
    return st


def _rank_of(line):
    """(rank key, the line after its prefixes): "rank 3" for torch's `[rank3]:`, "local rank 3"
    for torchrun's `[default3]:`; the innermost prefix wins, as in health/attribution.py."""
    if not line.startswith("["):
        return None, line  # no prefix: most lines of a one-process log
    match = RANK_PREFIX_RE.match
    key = None
    while True:
        m = match(line)
        if not m:
            return key, line
        key = ("rank " if m.group(1) == "rank" else "local rank ") + m.group(2)
        line = line[m.end():]


def _read(st, path, now):
    """The lines the log gained since the last call: {rank: (last step or None, last line no)},
    the run's last step in them, the lowest, and the read's time (the log's mtime: when its last
    line was written)."""
    try:
        f = open(path, "rb")
    except OSError:
        return {}, None, None, None
    with f:
        fs = os.fstat(f.fileno())
        if fs.st_size < st["offset"]:  # replaced or truncated: read it from its start
            st["offset"], st["carry"] = 0, ""
        start = max(st["offset"], fs.st_size - READ_BYTES)
        f.seek(start)
        data = f.read(fs.st_size - start)
    t = min(now, fs.st_mtime)
    if data or st["growth_t"] is None:
        st["growth_t"] = t
    carry = st["carry"] if start == st["offset"] else ""
    st["offset"] = start + len(data)
    if carry:
        data = carry.encode("utf-8") + data  # decoded, then encoded: the same text again
    cut = data.rfind(b"\n")
    st["carry"] = data[cut + 1:].decode("utf-8", "replace")[-4096:]
    seen, best, low, n = {}, None, None, 0
    for key, step in line_facts(data[:cut], _rank_of) if cut >= 0 else ():
        st["lines"] += 1
        if step is not None:
            n += 1
            best = step  # the last in the log's order (an epoch's counter may start again)
        if step is not None and (low is None or step < low):
            low = step
        if key is not None:
            old = seen.get(key, (None, 0))[0]
            seen[key] = (step if step is not None else old, st["lines"])
    return seen, best, low, t, n


def _advance(rec, step, t):
    """REC's step to STEP, the last one its log printed, seen at T. Any other value is
    progress: a counter that starts again each epoch goes back, and the run is not stalled.
    A step-time estimate when an earlier read saw it go forward."""
    if step is None or step == rec.get("step"):
        return
    if rec.get("step") is not None and rec.get("step_t") is not None and t > rec["step_t"] and step > rec["step"]:
        rec["iv"] = (rec.get("iv") or [])[-(KEEP - 1):] + [(t - rec["step_t"]) / float(step - rec["step"])]
    rec["step"], rec["step_t"] = step, t


def update(st, att, now):
    seen, best, low, t, n = _read(st, att["log"], now)
    if t is None:
        return
    if n and best != st.get("step") and st.get("step_t") is not None and t > st["step_t"]:
        # the time between step lines: what a healthy run may go without a new step
        st["li"] = (st.get("li") or [])[-(KEEP - 1):] + [(t - st["step_t"]) / float(n)]
    if n:  # the time between writes that carried steps (the first: from the attempt's start)
        prev = st.get("wt") or att.get("started_at")
        if prev is not None and t > prev:
            st["wi"] = (st.get("wi") or [])[-(KEEP - 1):] + [t - prev]
        st["wt"] = max(t, st.get("wt") or 0)
    _advance(st, best, t)
    if low is not None and (st.get("min_step") is None or low < st["min_step"]):
        st["min_step"] = low  # a resumed run's first step: the steps counted from it
    for key, (step, line_no) in seen.items():
        r = st["ranks"].setdefault(key, {"step": None, "step_t": None, "iv": []})
        r["line_t"], r["line_no"] = t, line_no
        if step is not None and r.get("step_t") is None and r.get("step") is None:
            r["step"], r["step_t"] = step, t
        else:
            _advance(r, step, t)


def _sample_cpu(st, att, now):
    """CPU seconds of each rank's processes (env RANK=N among the job's descendants),
    kept as samples over time."""
    job = (att.get("job") or {}).get("pid")
    if not job:
        return
    from ..core.procfs import descendants
    procs = scan_procs()
    if int(job) not in procs:
        return
    cpu = {}
    for pid in [int(job)] + list(descendants([int(job)], procs)):
        p = procs.get(pid)
        rank = p.env("RANK") if p is not None and not p.dead else None
        if rank is not None and rank.isdigit():
            key = "rank " + rank
            cpu[key] = cpu.get(key, 0.0) + (p.utime + p.stime) / float(CLK_TCK)
    if st.get("step") is None:  # before the first step: is the tree starting, or still?
        st["tree"] = _thin((st.get("tree") or []) + [[now] + _tree_use(procs, int(job), att)])
    else:
        st.pop("tree", None)
    for key, c in cpu.items():
        st["cpu"][key] = (st["cpu"].get(key) or [])[-(CPU_SAMPLES - 1):] + [[now, round(c, 3)]]
    for key in list(st["cpu"]):
        if key not in cpu:
            del st["cpu"][key]  # that rank's processes are gone


def _tree_use(procs, job, att=None):
    """[CPU seconds, bytes read and written, processes whose I/O could not be read] of the
    job, its descendants and the run's other members: a tree that loads a model reads
    (rchar/wchar count page-cache reads too, read_bytes an mmapped file's reads from storage)
    or computes; one hung before its first step does neither. A member's CPU counts its reaped
    children's (cutime, cstime), as its rchar/wchar count their I/O: a loader working in
    short-lived children (a shell loop, a pool that replaces its workers) would otherwise show
    ~0% of a core while /proc says a core is busy, and be called stalled."""
    from ..core.procfs import descendants
    cpu, io, unread = 0.0, 0, 0
    pids = set([job]) | set(descendants([job], procs))
    if att is not None and att.get("run"):
        # every member status counts (runs.members: the marker, the cgroup, what the shim
        # adopted): a loader that daemonized (a data server, double fork) is the
        # shim's child, not the job's, and its busy core read as a still tree, a stall
        from ..core.procfs import protected
        from ..proc.runs import members
        pids |= set(members(att["run"], att, procs, protected(procs)))
    for pid in sorted(pids):
        p = procs.get(pid)
        if p is None or p.dead:
            continue
        cpu += (p.utime + p.stime + p.cutime + p.cstime) / float(CLK_TCK)
        try:
            with open("/proc/%d/io" % pid) as f:
                fields = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
            # read() and write() (rchar, wchar: page-cache hits too), or what storage moved
            # (read_bytes, write_bytes: an mmapped file's page faults, safetensors' load,
            # which read() never sees), whichever is more: a lower bound, never twice a read
            io += (max(int(fields.get("rchar", 0)), int(fields.get("read_bytes", 0)))
                   + max(int(fields.get("wchar", 0)), int(fields.get("write_bytes", 0))))
        except (OSError, ValueError):
            unread += 1  # gone meanwhile, or not ours to read (ptrace mode)
    return [round(cpu, 3), io, unread]


def _tree_rates(st, window):
    """(cores, bytes a second, processes unread) of the tree over the last WINDOW seconds,
    or None while the samples do not span it."""
    samples = st.get("tree") or []
    if not samples:
        return None
    t1, c1, b1, unread = samples[-1]
    old = [s for s in samples if s[0] <= t1 - window]
    if not old or t1 <= old[-1][0]:
        return None
    dt = t1 - old[-1][0]
    return (c1 - old[-1][1]) / dt, max(0, b1 - old[-1][2]) / dt, unread


def median(xs):
    xs = sorted(xs)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2.0


def step_time(st, started=None):
    """(the median step time, "reads") from the estimates; else, once a step was seen,
    (time from the attempt's start to the furthest step / steps seen, "start"): an upper
    bound (it holds the start-up), so a stall_after derived from it errs long, never short
    (a 60 s step must not look stalled at 120 s before two reads saw it advance)."""
    med = median(st.get("iv") or [])
    if med is not None:
        return med, "reads"
    if st.get("step") is not None and started and st.get("step_t") and st["step_t"] > started:
        return (st["step_t"] - started) / max(st["step"] - (st.get("min_step") or 0), 1), "start"
    return None, None


def stall_after(cfg, st, started=None):
    """(seconds, "set" | "derived" | "default", the step time or None)."""
    med, _ = step_time(st, started)
    if cfg.get("after"):
        return float(cfg["after"]), "set", med
    if med is not None:
        return max(FACTOR * max(med, median(st.get("li") or []) or 0), WRITE_FACTOR * (median(st.get("wi") or []) or 0),
                   MIN_AFTER), "derived", med
    return MIN_AFTER, "default", None


def stall_rule(cfg, st, started=None):
    """The rule that gave stall_after, in words with its numbers: "set", "default: ...", or
    the derivation's largest term named first, then every term (status printed "max(10 x
    median step 0.5s, 120s)" beside 271.674 s, which 3 x the time between writes gave)."""
    med, how = step_time(st, started)
    if cfg.get("after"):
        return "set"
    if med is None:
        return "default: no step time observed yet"
    li = median(st.get("li") or []) or 0
    wi = median(st.get("wi") or []) or 0
    step = ("10 x step time <= %.3gs (from the attempt's start)" % med if how == "start"
            else "10 x median step %.3gs" % med)
    terms = [(FACTOR * med, step)]
    if li > med:
        terms.append((FACTOR * li, "10 x median time between step lines %.3gs" % li))
    if wi:
        terms.append((WRITE_FACTOR * wi, "3 x median time between the log's writes %.3gs" % wi))
    terms.append((MIN_AFTER, "the floor"))
    said = ["%s = %gs" % (w, round(v, 3)) for v, w in terms]
    top = max(range(len(terms)), key=lambda i: terms[i][0])
    return "derived: %s, over %s" % (said[top], "; ".join(s for i, s in enumerate(said) if i != top))


def _thin(samples):
    """At most CPU_SAMPLES, older ones further apart: a window of stall_after stays spanned."""
    if len(samples) > CPU_SAMPLES:
        half = len(samples) // 2
        samples[:half] = samples[:half:2]
    return samples


def cpu_rate(samples, window):
    """Cores the rank used over the last WINDOW seconds of SAMPLES, or None when the samples
    do not span it yet."""
    if not samples:
        return None
    t1, c1 = samples[-1]
    old = [s for s in samples if s[0] <= t1 - window]
    if not old or t1 <= old[-1][0]:
        return None
    return (c1 - old[-1][1]) / (t1 - old[-1][0])


def _node(att):
    mn = att.get("multinode") or {}
    return mn.get("rank")


def _rank_fields(key, node):
    kind, _, n = key.rpartition(" ")
    return {"rank": int(n), "rank_kind": kind, "node": node}


def _behind(st):
    """The ranks whose step is lowest while another's is higher: stopped first."""
    steps = dict((k, r["step"]) for k, r in st["ranks"].items() if r.get("step") is not None)
    if len(set(steps.values())) < 2:
        return [], None
    low, high = min(steps.values()), max(steps.values())
    return sorted(k for k, s in steps.items() if s == low), (low, high)


def _idle(st, window):
    """(ranks whose CPU stood still over WINDOW, ranks that kept a core busy meanwhile)."""
    rates = dict((k, cpu_rate(s, window)) for k, s in st["cpu"].items())
    rates = dict((k, v) for k, v in rates.items() if v is not None)
    idle = sorted(k for k, v in rates.items() if v < IDLE_CORE)
    busy = sorted(k for k, v in rates.items() if v > BUSY_CORE)
    return idle, busy, rates


def _stall(st, att, after, src, now, stacks_of=None):
    """The stall alert, or None. STACKS_OF(since, now): the episode's stacks (taken at its first
    sighting); where they read the ranks, they name the cause (_by_stacks), the log's steps
    and the ranks' CPU only where they do not."""
    from ..logmetrics.alerts import alert
    node = _node(att)
    said = "stall_after %gs, %s" % (after, src)
    if st["step"] is not None:
        since, basis = st["step_t"], "step"
        detail = "step %s has not advanced for %ds (%s)" % (_num(st["step"]), now - since, said)
    else:
        since, basis = st["growth_t"] or att.get("started_at") or now, "log"
        if now - since <= after:
            return None
        use = _tree_rates(st, after)
        if use is None or use[0] >= IDLE_CORE or use[1] >= IDLE_IO:
            return None  # starting (or not yet sampled over the window): said by starting()
        detail = ("the log shows no steps: judged by its silence and the process tree's stillness: no new "
                  "output for %ds, and %s over the last %gs (%s)" % (now - since, _use_text(use), after, said))
    if now - since <= after:
        return None
    stacks = stacks_of(since, now) if stacks_of else None
    behind, span = _behind(st)
    idle, busy, _ = _idle(st, min(after, max(now - since, 1.0)))
    suspects, why, rank_basis = _by_stacks(stacks, st, node)
    if rank_basis is None:
        suspects, rank_basis = behind or (idle if busy else []), "log" if behind else "cpu"
    extra = {}
    if why:
        detail += why
    elif behind:
        detail += "; %s stopped first (its last step %s, the others reached %s)" % (
            ", ".join(_name(k, node) for k in behind), _num(span[0]), _num(span[1]))
    elif suspects:
        detail += "; %s used no CPU while %s kept a core busy" % (
            ", ".join(_name(k, node) for k in idle), ", ".join(busy))
    if suspects:
        extra = _rank_fields(suspects[0], node)
        extra.update(ranks=suspects, rank_basis=rank_basis)
    if node is not None:
        extra["node"] = node
    if stacks:
        extra["stacks"] = stacks
    return alert("stall", now, detail, metric="step" if basis == "step" else None,
                 value=round(now - since, 1), since=since, basis=basis, stall_after=after, **extra)


def _use_text(use):
    cores, rate, unread = use
    return "%.1f%% of a core, %s/s of reads and writes%s" % (
        100 * cores, _bytes(rate), "; the I/O of %d of its processes unreadable" % unread if unread else "")


def _bytes(n):
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return "%.0f %s" % (n, unit) if unit == "B" else "%.1f %s" % (n, unit)
        n /= 1024.0


def starting(st, att, after, now):
    """Before the first step, what the tree does: {"for_s" (since the attempt's start),
    "cpu_cores", "io_bytes_s", "window_s", "verdict"}: "starting" (it computes or reads: a
    load, not a stall), "still" (neither, over stall_after: judged with the log's silence),
    or "unsampled" (its CPU and I/O not sampled over the window yet: nothing is said of it)."""
    if st.get("step") is not None:
        return None
    begun = att.get("started_at") or now
    out = {"for_s": round(now - begun, 1), "window_s": after}
    use = _tree_rates(st, after)
    if use is None:
        out["verdict"] = "unsampled"
        return out
    out.update({"cpu_cores": round(use[0], 3), "io_bytes_s": round(use[1]), "verdict": "starting"
                if use[0] >= IDLE_CORE or use[1] >= IDLE_IO else "still"})
    if use[2]:
        out["io_unreadable"] = use[2]
    return out


def _num(v):
    return int(v) if isinstance(v, float) and v == int(v) else v


def _stragglers(st, att, after, ratio, now):
    from ..logmetrics.alerts import alert
    node, out = _node(att), []
    ranks = dict((k, r) for k, r in st["ranks"].items() if r.get("step_t") is not None)
    going = [k for k, r in ranks.items() if now - r["step_t"] <= after]
    for k, r in sorted(ranks.items()):
        if going and k not in going:
            top = max(going, key=lambda g: ranks[g]["step"])
            out.append(alert("straggler", now, "%s: its step %s has not advanced for %ds (stall_after %gs) "
                             "while %s went on to step %s" % (
                                 _name(k, node), _num(r["step"]), now - r["step_t"], after,
                                 _name(top, node), _num(ranks[top]["step"])),
                             metric="step", value=round(now - r["step_t"], 1), since=r["step_t"],
                             basis="log", **_rank_fields(k, node)))
    idle, busy, rates = _idle(st, after)
    for k in idle if busy else ():
        out.append(alert("straggler", now, "%s: its processes used no CPU for %gs (%.0f%% of a core) "
                         "while %s kept a core busy" % (_name(k, node), after, 100 * rates[k],
                                                       ", ".join(busy)),
                         metric="cpu_cores", value=round(rates[k], 3), basis="cpu", **_rank_fields(k, node)))
    meds = dict((k, median(r.get("iv") or [])) for k, r in ranks.items())
    meds = dict((k, v) for k, v in meds.items() if v)
    for k, v in sorted(meds.items()):
        # the median of the OTHER ranks: with two ranks the median of all would be their mean,
        # which no rank is ever 3 x slower than
        mid = median([x for o, x in meds.items() if o != k])
        if mid and v > ratio * mid:
            out.append(alert("straggler", now, "%s: %.1f x slower than the other ranks' median (%.3gs per step, "
                             "median %.3gs; straggler_ratio %g)" % (_name(k, node), v / mid, v, mid, ratio),
                             metric="step_time_s", value=round(v, 4), basis="step_time", ratio=round(v / mid, 2),
                             **_rank_fields(k, node)))
    return out


def check(store, att, cfg=None, now=None, capture=True, lock_wait=None):
    """Read what the attempt's log gained and sample its ranks' CPU; judge. Returns
    {"stall_after", "stall_after_from" (set | derived | default), "median_step_s", "step",
    "step_t", "ranks", "alerts"} (alerts: at most one stall, and the stragglers). On a stall's
    first sight (one episode: until the step moves again) the stacks are taken once
    (capture; stacks.py where this agent has it). lock_wait: seconds to wait for the stall
    state's lock (store.side_lock; SideLocked after), None: as long as it takes."""
    cfg = dict(att.get("stall") or {}, **dict((k, v) for k, v in (cfg or {}).items() if v is not None))
    now = time.time() if now is None else now
    with side_lock(store, "stall", lock_wait):
        st = _load(store, att)
        update(st, att, now)
        after, src, med = stall_after(cfg, st, att.get("started_at"))
        # /proc is read whole for the ranks' CPU: at most every after/10 s (1 s to 10 s), so a
        # watch polling twice a second does not pay it each time (bench/hang.py measures it)
        if now - (st.get("cpu_t") or 0) >= min(max(after / 10.0, 1.0), 10.0):
            st["cpu_t"] = now
            _sample_cpu(st, att, now)
            for s in st["cpu"].values():
                _thin(s)
        alerts = []
        a = _stall(st, att, after, src, now, lambda since, t: _episode(store, st, att, since, t, capture))
        if a is not None:
            alerts.append(a)
        else:
            st["episode"] = None  # the step moved: a later stall is a new episode
        alerts += _stragglers(st, att, after, float(cfg.get("ratio") or RATIO), now)
        write_json(os.path.join(store.dir, "stall.json"), st)
    ranks = dict((k, {"step": _num(r.get("step")), "step_t": r.get("step_t"), "line_t": r.get("line_t")})
                 for k, r in st["ranks"].items())
    for k, s in st["cpu"].items():
        ranks.setdefault(k, {})["cpu_s"] = s[-1][1]
    out = {"stall_after": after, "stall_after_from": src, "median_step_s": med,
           "stall_after_rule": stall_rule(cfg, st, att.get("started_at")),
           "step_time_from": step_time(st, att.get("started_at"))[1],
           "straggler_ratio": float(cfg.get("ratio") or RATIO), "step": _num(st["step"]),
           "step_t": st["step_t"], "ranks": ranks, "alerts": alerts}
    begun = starting(st, att, after, now)
    if begun is not None:
        out["no_step_yet"] = begun
    return out


class StallJudge(object):
    """A watch's or the shim's stall and straggler alerts: RULES' stall_after and
    straggler_ratio over the attempt's own (the judge interface: health/window.py's Judge)."""

    def __init__(self, store, rules):
        self.store, self.cfg = store, {"after": rules.get("stall_after"), "ratio": rules.get("straggler_ratio")}

    def poll(self, att, alive, now):
        """None for a job that is not alive; the state lives in stall.json, not here."""
        if not alive or not att.get("log"):
            return []
        return check(self.store, att, self.cfg, now)["alerts"]


def _episode(store, st, att, since, now, capture):
    """The episode's stacks: taken once per stall episode (keyed by the time progress
    stopped), if asked; None where none were."""
    ep = st.get("episode")
    if not ep or ep.get("since") != since:
        ep = st["episode"] = {"since": since, "at": now}
        if capture:
            ep["stacks"] = take_stacks(att, store)
    return ep.get("stacks") or None


def take_stacks(att, store=None):
    """The run's stacks through stacks.py (capture, keep): {"path", "ok", "summary"}, and
    "note" saying why none were read (py-spy missing, ptrace denied: its error and hint)."""
    try:
        from . import stacks
    except ImportError:
        return {"ok": False, "note": "stacks were not taken: this agent has no stacks module"}
    home = store.home if store is not None else None
    try:
        doc = stacks.capture(att, native=False, timeout=10.0, home_dir=home.path if home else None)
        out = {"path": stacks.keep(att, doc, home=home), "ok": bool(doc.get("ok"))}
    except Exception as e:  # a stall is reported whatever the stack reader does
        return {"ok": False, "note": "stacks could not be taken: %s" % e}
    if doc.get("summary"):
        out["summary"] = doc["summary"]
    if stack_ranks(doc):
        out["ranks"] = stack_ranks(doc)  # who waits in a collective, who is elsewhere (_by_stacks)
    if not doc.get("ok"):
        out["note"] = "stacks not read: %s (%s)" % (doc.get("error"), doc.get("hint"))
    return out
