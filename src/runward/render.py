"""Human rendering of results and errors. JSON output needs none of this."""

from __future__ import annotations

import time


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def describe_exit(ex: dict | None) -> str:
    if not ex:
        return "exit status unknown"
    if ex.get("signal"):
        return f"killed by {ex['signal']}"
    return f"exit code {ex.get('code')}"


def _num(v) -> str:
    if isinstance(v, float):
        return f"{v:g}" if abs(v) < 1e6 else f"{v:.4g}"
    return str(v)


def render_error(cmd: str, e) -> str:
    lines = [f"runward {cmd}: error: {e.message}"]
    if e.hop:
        lines.append(f"  at hop: {e.hop}")
    d = e.details or {}
    if d.get("stderr_tail"):
        lines.append("  stderr: " + d["stderr_tail"].replace("\n", "\n          "))
    if d.get("failed_step"):
        lines.append(f"  failed step: {d['failed_step']}")
    res = e.result or {}
    if res.get("exit"):
        lines.append(f"  the job ended: {describe_exit(res['exit'])}")
    if res.get("last_lines"):
        lines.append("  last log lines:")
        lines += ["    | " + ln for ln in res["last_lines"]]
    for s in res.get("survivors") or []:
        lines.append(f"  survivor: pid {s['pid']} state {s.get('state', '?')} {s.get('note', '')} {s.get('cmd', '')}")
    for g in res.get("gpus_held") or []:
        lines.append(f"  {g}")
    if d.get("remote_traceback"):
        lines.append("  remote traceback:\n" + d["remote_traceback"])
    if e.hint:
        lines.append(f"  hint: {e.hint}")
    return "\n".join(lines)


def render_start(r: dict) -> str:
    lines = [f"started {r['name']} attempt {r['attempt']}: pid {r['pid']}, alive after {r['settle_s']:g}s settle"
             + (f", ready: {r['ready_line']!r}" if r.get("ready_line") else "")]
    if r.get("replaced") and not r["replaced"].get("already_stopped"):
        lines.insert(0, f"stopped attempt {r['replaced'].get('attempt')} first (verified dead)")
    if r.get("gpus") is not None:
        lines.append(f"  gpus: {','.join(map(str, r['gpus']))}"
                     + (f" (free after waiting {r['gpu_wait']['waited_s']:.1f}s)" if r.get("gpu_wait") else ""))
    lines.append(f"  log: {r['log']}")
    for ln in r.get("first_lines") or []:
        lines.append("    | " + ln)
    return "\n".join(lines)


def render_stop(r: dict) -> str:
    if r.get("already_stopped"):
        return "\n".join([f"{r['name']}: already stopped (no process of the run alive; last state: {r.get('state')})",
                          *_gpu_release_lines(r)])
    procs = r.get("processes") or []
    lines = [f"stopped {r['name']} attempt {r.get('attempt')}: {len(procs)} process(es) dead, verified "
             f"({r['signal']}, {r.get('stop_s', 0):.2f}s)"]
    for p in procs:
        lines.append(f"  pid {p['pid']:>7}  {p['fate']:<20} {p.get('cmd', '')[:80]}")
    lines += _gpu_release_lines(r)
    return "\n".join(lines)


def _gpu_release_lines(r: dict) -> list[str]:
    rel = r.get("gpu_release") or {}
    lines = [f"  gpu {g['index']}: {_mib(g.get('used_mib'), g.get('raw'))} used, "
             + ("released" if g.get("released") else "NOT released") for g in rel.get("gpus") or []]
    if rel.get("verified"):
        lines.append(f"  gpus released, verified ({rel.get('method')}, waited {rel.get('waited_s', 0):.2f}s)")
    elif rel.get("note") or rel.get("message"):
        lines.append(f"  {rel.get('note') or rel.get('message')}")
    return lines


def render_status(res: dict, target: str) -> str:
    runs = res.get("runs") or []
    if not runs:
        return f"no runs on {target}"
    now = res.get("time") or time.time()
    lines = []
    for r in runs:
        st = r["state"]
        head = f"{r['name']:<16} {st:<9} attempt {r.get('attempt')}"
        if st in ("running", "orphaned"):
            t = r.get("tree") or {}
            head += (f"  pid {r.get('pid')}  up {ago(t.get('uptime_s'))}  {t.get('processes', 0)} procs"
                     f"  cpu {t.get('cpu_seconds', 0):.1f}s  rss {human_bytes(t.get('rss_bytes'))}")
        elif st in ("exited", "failed"):
            head += f"  {describe_exit(r.get('exit'))}"
            if r.get("exit", {}) and r["exit"].get("at"):
                head += f"  {ago(now - r['exit']['at'])} ago"
            if r.get("duration_s") is not None:
                head += f"  ran {ago(r['duration_s'])}"
            if r.get("error"):
                head += f"  ({r['error']})"
        lines.append(head)
        if r.get("note"):
            lines.append(f"  note: {r['note']}")
        if r.get("stray_processes"):
            lines.append(f"  warning: processes of this run still alive: {r['stray_processes']} (runward stop {r['name']})")
        for g in r.get("gpu_usage") or []:
            lines.append(f"  gpu {g['index']}: {_mib(g.get('used_mib'))} / {_mib(g.get('total_mib'))} used"
                         + (f", this run {_mib(g['run_mib'])}" if g.get("run_mib") is not None else "")
                         + (f" ({g['note']})" if g.get("note") else ""))
        if r.get("gpu_note"):
            lines.append(f"  gpus: {r['gpu_note']}")
        for d in r.get("drift") or []:
            lines.append(f"  code drift: {d['path']} changed on disk since this attempt started")
        for d in r.get("local_drift") or []:
            lines.append(f"  local drift: {d['local']} differs from the deployed {d['remote']}")
        h = r.get("health") or {}
        if h.get("metrics"):
            lines.append("  metrics: " + "  ".join(f"{k}={_num(v)}" for k, v in h["metrics"].items()))
        if h.get("throughput_series"):
            from .health import sparkline
            lines.append(f"  {h['throughput_metric']}: {sparkline(h['throughput_series'])}")
        for a in h.get("alerts") or []:
            from .health import format_alert
            lines.append(f"  alert: {format_alert(a)}")
        lg = r.get("log") or {}
        if lg.get("exists"):
            lines.append(f"  log {lg['path']} ({human_bytes(lg.get('size'))}): {lg.get('last_line', '')[:100]}")
    return "\n".join(lines)


def render_doctor(res: dict) -> str:
    lines = [f"doctor {res['target']}"]
    for h in res["hops"]:
        if not h["reached"]:
            e = h["error"]
            lines.append(f"  {h['hop']:<24} NOT REACHED: {e['message']}")
            if e.get("hint"):
                lines.append(f"  {'':<24} hint: {e['hint']}")
            continue
        c = h["checks"]
        smi = c.get("nvidia_smi") or {}
        smi_s = "absent" if not smi.get("path") else ("ok" if smi.get("exit") == 0 else f"fails (exit {smi.get('exit')})")
        lines.append(f"  {h['hop']:<24} reached in {c['round_trip_s']:.3f}s: python {c['python']}"
                     f"{'' if c['python_ok'] else ' (TOO OLD: need >= 3.8)'}, {c['host']} kernel {c['kernel']}")
        lines.append(f"  {'':<24} state dir {c['state_dir']['path']} "
                     f"{'writable' if c['state_dir']['writable'] else 'NOT writable: ' + c['state_dir'].get('error', '')}"
                     f", cgroups {'yes' if c['cgroups']['can_create'] else 'no'}, pidfd {'yes' if c['pidfd'] else 'no'}"
                     f", nvidia-smi {smi_s}, clock skew {c['clock_skew_s']:+.3f}s (±{c['clock_skew_uncertainty_s']:.3f}s)"
                     f", boot {c['boot_id'][:8]}"
                     f"{', in a container' if c.get('in_container') else ''}")
        if c.get("resident"):
            lines.append(f"  {'':<24} resident agent: {_resident_text(c['resident'])}")
    return "\n".join(lines)


def _resident_text(r: dict) -> str:
    route = r.get("route")
    if route == "off":
        return "not used (RUNWARD_RESIDENT=0)"
    if route == "given up":
        return ("NOT used: two tries in a row got no reply (does sshd refuse unix-socket forwarding? "
                "AllowStreamLocalForwarding)")
    if not r.get("alive"):
        return "not running: the next read-only call starts it"
    if route == "forward":
        return "running, reached through the ssh control master's forward"
    return "running; the next read-only call sets up the control master's forward to it"


def render_procs(procs: list[dict]) -> str:
    lines = []
    for p in procs:
        started = time.strftime("%H:%M:%S", time.localtime(p["started_at"])) if p.get("started_at") else "?"
        lines.append(f"{p['pid']:>7} {started} {p['user']:<8} {(p.get('run') or '-'):<14} {p['cmd'][:120]}")
    return "\n".join(lines)


def _mib(v, raw: dict | None = None, key: str = "used_mib") -> str:
    if v is None:
        return (raw or {}).get(key, "?")
    return f"{v:,.0f} MiB" if isinstance(v, (int, float)) else str(v)


_MAPPING = {"direct": "pids read in this target's own /proc, by the run marker",
            "nspid": "host pids matched through the host's /proc/PID/status NSpid line",
            "memory": "pids are the host's; each process attributed to the one run recorded on its GPU"}


def render_gpus(res: dict) -> str:
    gpus = res.get("gpus") or []
    if not gpus:
        return res.get("note") or "no GPU listed by nvidia-smi"
    lines = []
    for g in gpus:
        raw = g.get("raw") or {}
        util = f"{g['utilization_pct']}%" if g.get("utilization_pct") is not None else raw.get("utilization_pct", "?")
        lines.append(f"GPU {g.get('index') if g.get('index') is not None else raw.get('index', '?')}  "
                     f"{g.get('name')}  {g.get('uuid')}  {_mib(g.get('used_mib'), raw)} / "
                     f"{_mib(g.get('total_mib'), raw, 'total_mib')}  util {util}")
        for p in g.get("processes") or []:
            lines.append("    " + _proc_line(p))
        if not g.get("processes"):
            lines.append("    no compute process")
    for p in res.get("unattributed_processes") or []:
        lines.append(f"on {p.get('gpu_uuid')} (not a GPU uuid listed above): " + _proc_line(p))
    m = res.get("mapping")
    lines.append(f"mapping: {m} ({_MAPPING.get(m, '')})")
    if res.get("mapping_note"):
        lines.append(f"  note: {res['mapping_note']}")
    return "\n".join(lines)


def _proc_line(p: dict) -> str:
    raw = p.get("raw") or {}
    if p.get("pid") is not None:
        who = f"pid {p['pid']}" + (f" (host pid {p['host_pid']})" if p.get("host_pid") not in (None, p["pid"]) else "")
    elif p.get("host_pid") is not None:
        who = f"host pid {p['host_pid']}"
    else:
        who = f"pid {raw.get('pid', '?')}"
    run = (f"run {p['run']} attempt {p.get('attempt')}" + (" (by memory)" if p.get("mapped_by") == "memory" else "")
           if p.get("run") else f"run {p['other_home_run']} of another runward home" if p.get("other_home_run")
           else "no run" + (f" (one of {', '.join(p['candidates'])})" if p.get("candidates") else ""))
    tail = f"  [{p['state']}] {p.get('cmd') or ''}".rstrip() if p.get("state") else ""
    note = f"  ({p['note']})" if p.get("note") else ""
    return f"{who:<24} {_mib(p.get('used_mib'), raw):>12}  {run}{tail}{note}"
