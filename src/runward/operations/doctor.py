"""doctor: what works on a target, hop by hop, and where the chain breaks."""

from __future__ import annotations

from ..errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNREACHABLE
from . import Outcome, Targeted, single
from .common import load_config, target_of


class DoctorOptions(Targeted):
    """What `runward doctor` takes (the common flags only)."""


def doctor(opts: DoctorOptions) -> Outcome:
    from .. import api
    cfg = load_config(opts)
    target = target_of(opts, cfg)
    res = api.doctor(target)
    if any((h.get("checks") or {}).get("modules_missing") for h in res["hops"]):
        res["ok"] = False  # reached, but the ops that import those modules would fail there
    code = EXIT_OK if res["ok"] else EXIT_UNREACHABLE
    if cfg.bad_targets:  # kept for where they are used (spec/config.py); doctor says them all, exit 2
        res["config_errors"] = [{"target": n, **e.to_dict()} for n, e in cfg.bad_targets.items()]
        code = max(code, EXIT_BAD_INPUT)
    return single("doctor", target, res, lambda: render_doctor(res), code)


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
        cg = c.get("cgroups") or {}
        if cg.get("without"):  # what "cgroups no" costs, and what still finds an escapee
            lines.append(f"  {'':<24} without cgroups: {cg['without']}")
        if cg.get("subreaper_note"):
            lines.append(f"  {'':<24} NO SUBREAPER: {cg['subreaper_note']}")
        if c.get("modules_missing"):
            lines.append(f"  {'':<24} python LACKS the standard module(s) {', '.join(c['modules_missing'])}: "
                         "install the whole standard library there (apt-get install -y python3)")
        if (c.get("pid1") or {}).get("reaps") is False:
            z = c["pid1"].get("zombies") or 0
            lines.append(f"  {'':<24} pid 1 ({c['pid1']['comm']}) DOES NOT REAP orphans"
                         + (f": {z} zombie(s) under it" if z else "") + "; fix: podman/docker run --init, "
                         "or an init (tini, catatonit) as the container's entrypoint")
        if c.get("resident"):
            lines.append(f"  {'':<24} resident agent: {_resident_text(c['resident'])}")
    for e in res.get("config_errors") or []:
        lines.append(f"  BAD TARGET {e['target']}: {e['message']}" + (f"\n  {'':<24} hint: {e['hint']}" if e.get("hint") else ""))
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
    if route == "relay":
        return ("running, reached through a local relay's kept connection (one round trip; RUNWARD_RELAY=0 "
                "turns it off), over the ssh control master's forward")
    return "running; the next read-only call sets up the control master's forward to it"

