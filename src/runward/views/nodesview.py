"""How a multi-node run's results read (multinode/ returns them as data, operations/ hand them
here): its start, stop and status over every node, a node's line, stop --checkpoint's steps,
deploy and restart over every node."""

from __future__ import annotations

# Each function imports the views it uses where it uses them: operations/ import this module
# on every multi-node call, and the text is made only when it is shown.


def _stopped_by_cli(res: dict) -> bool:
    """A node's job ended by `runward stop`: this stop's own result (it signalled the job), or
    a record that says a stop from the CLI asked for the end (status, later)."""
    if (res.get("already_stopped") is False or res.get("ended_by") == "whole_run_stop") and "verified_dead" in res:
        return True
    return ((res.get("stopped") or {}).get("by") == "cli" or (res.get("stop_requested") or {}).get("by") == "cli") \
        and not res.get("peer_stop")


def node_line(r: dict) -> str:
    head = f"  node {r['rank']} {r['target']}: "
    if not r["ok"]:
        e = r["error"]
        return head + f"{e['type']}: {e['message']}"
    res = r.get("result") or r.get("run") or {}
    if "ports" in res:  # the probe's answer: this node was reached, and nothing started here
        return head + "reachable, nothing started"
    if "start_cancelled" in (res.get("verified") or ()):  # a restart's attempt blocked on the GPUs
        return head + f"cancelled the blocked start of attempt {res.get('attempt')} (it never ran)"
    bits = [r.get("state") or res.get("state") or ("alive" if res.get("alive_after_settle") else "")]
    if bits[0] in ("exited", "stopped") and not r.get("failed") and _stopped_by_cli(res):
        bits[0] = "stopped by runward stop"  # its exit code is the job's answer to the stop signal
    if bits[0] == "blocked" and (res.get("blocked") or {}).get("why"):
        bits[0] += f" ({res['blocked']['why']})"
    if res.get("pid"):
        bits.append(f"pid {res['pid']}")
    if res.get("attempt"):
        bits.append(f"attempt {res['attempt']}")
    if res.get("exit"):
        from .render import describe_exit  # an unknown exit (an orphan's stop) said as unknown
        bits.append(describe_exit(res["exit"]) + (" (failed by itself)" if r.get("failed") else ""))
    if res.get("ended_by") == "whole_run_stop":  # this stop's, whichever way it came first
        pass
    elif (res.get("peer_stop") or {}).get("whole"):  # node 0's `runward stop`, heard over the link
        bits.append(f"stopped by its shim: {res['peer_stop'].get('why')}")
    elif res.get("peer_stop"):
        bits.append(f"stopped because node {res['peer_stop'].get('by_node')} failed")
    if res.get("coordinator_lost"):
        bits.append(f"coordinator lost ({res['coordinator_lost'].get('why')}): the nodes no longer watch each other")
    if "verified_dead" in res:
        bits.append("verified dead" if res["verified_dead"] else "NOT verified dead")
    return head + ", ".join(b for b in bits if b)


def render(res: dict, verb: str) -> str:
    lines = [f"{res['name']}: {res.get('state') or ('stopped on every node' if res.get('verified_dead') else verb)}"
             f" over {res['nnodes']} nodes"
             + (f" (run id {res['run_id']}, master {res['master_addr']}:{res['master_port']})" if res.get("run_id") else "")]
    if res.get("checkpoint"):  # said first: it came before the stop (multinode/checkpoint.py)
        lines += checkpoint_lines(res["checkpoint"])
    from .health import format_alert
    for r in res["nodes"]:
        lines.append(node_line(r))
        unseen = r["ok"] and (r.get("result") or r.get("run") or {}).get("blind_spot")
        if unseen:  # what this node's search cannot see (agent/proc/runs.py), said as one node's status says it
            lines.append("    note: " + unseen)
        for a in ((r.get("run") or {}).get("health") or {}).get("alerts") or ():
            if a.get("kind") in ("stall", "straggler"):  # a live node's own (agent/health/stall.py names the node)
                lines.append("    alert: " + format_alert(a))
        rb = r.get("rollback")
        if rb:
            lines.append("    stopped again: " + ("verified dead" if rb.get("verified_dead") else
                                                 f"NOT verified: {(rb.get('error') or {}).get('message', '')}"))
    for k in ("attribution", "stall"):
        if res.get(k):
            lines.append("  " + res[k]["summary"])
    if res.get("message"):
        lines.append(res["message"])
    if res.get("note"):
        lines.append("note: " + res["note"])
    return "\n".join(lines)


def checkpoint_lines(rows: list[dict]) -> list[str]:
    """Each node's checkpoint step (multinode/checkpoint.py's rows), said before the stop."""
    from .render import checkpoint_line
    out = []
    for r in rows:
        where = f"  node {r['rank']} ({r['target']}) "
        if r["ok"]:
            out.append(where + checkpoint_line(r["result"]))
        else:
            out.append(where + f"checkpoint: not done ({r['error'].get('message')}): stopping as usual")
    return out


def render_deploy(res: dict) -> str:
    from .render import describe_sync
    word = "would deploy" if res.get("dry_run") else "deployed"
    ok = sum(1 for r in res["nodes"] if r["ok"])
    lines = [f"{res['name']}: {word} to {ok} of {res['nnodes']} nodes"]
    for r in res["nodes"]:
        head = f"  node {r['rank']} {r['target']}: "
        if not r["ok"]:
            lines.append(head + f"{r['error']['type']}: {r['error']['message']}")
            continue
        lines.append(head + ("sha256 verified on the node" if r["result"].get("verified") else "dry run"))
        lines += ["    " + ln for ln in describe_sync(r["result"], r["target"], "deployed").splitlines()]
    if res.get("message"):
        lines.append(res["message"])
    return "\n".join(lines)


def render_restart(res: dict) -> str:
    parts = []
    for s in res["steps"]:
        if s["step"] == "deploy":
            parts.append(render_deploy(s["result"]))
        else:
            parts.append(render(s["result"], s["step"]))
    if res.get("failed_step"):
        parts.append(res["message"])
    return "\n".join(parts)
