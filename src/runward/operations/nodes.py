"""A verb over a multi-node run's nodes, as the operations layer answers it: which nodes (--on
given more than once, runward.toml, a node's record) and the nodes' rows said as one Outcome.
multinode/ returns the rows; this is where they become a verb's answer."""

from __future__ import annotations

from .. import api
from ..errors import EXIT_OK, BadInput
from ..multinode.nodes import discover, each_node
from ..views.nodesview import render
from ..targets import Target
from . import Outcome
from .common import ssh_settings, target_of


def nodes_of(args, cfg, name: str | None) -> list[Target] | None:
    """The nodes of NAME: --on given more than once, else runward.toml's [runs.NAME] nodes
    (unless one --on names a single target); None for a run on one target."""
    ssh_settings(cfg)  # as operations/common.target_of
    given = list(getattr(args, "nodes", None) or [])
    if len(given) > 1:
        return [cfg.target(t) for t in given]
    run = cfg.runs.placement(name or "")
    if run.get("nodes") and not given:
        return [cfg.target(t) for t in run["nodes"]]
    return None


def outcome(verb: str, res: dict, code: int, text: str | None = None):
    """A verb's answer over the nodes, as the operations layer returns it."""
    doc = {"ok": code == EXIT_OK, "command": verb, "target": ",".join(r["target"] for r in res["nodes"]),
           "result": res}
    if code != EXIT_OK:
        doc["error"] = {"type": "NodesFailed", "message": res.get("message") or f"{verb} failed on a node",
                        "exit_code": code}
    return Outcome(verb, code, doc, lambda: render(res, verb) if text is None else text)


# --- logs and watch over nodes

def pick_node(args, cfg, name: str, node: int | None, all_nodes: bool) -> tuple[Target | None, list[Target] | None]:
    """(the one target to read, None) or (None, every node) for logs/watch: node R (default
    0) of a multi-node run, whose nodes come from --on, runward.toml or the record of the
    one --on target; a run on one target is read where it is."""
    nodes = nodes_of(args, cfg, name)
    if nodes is None and (node is not None or all_nodes):
        nodes = discover(target_of(args, cfg, name), name)
        if nodes is None:
            raise BadInput(f"{name} is not a multi-node run there: --node and --all-nodes need one",
                           f"name its nodes: --on NODE0 --on NODE1 ..., or nodes = [...] in [runs.{name}]")
    if nodes is None:
        return target_of(args, cfg, name), None
    if all_nodes:
        return None, nodes
    r = 0 if node is None else node
    if not 0 <= r < len(nodes):
        raise BadInput(f"invalid --node {r}: {name} has nodes 0..{len(nodes) - 1}", "give a rank in that range")
    return nodes[r], None


def logs_all(nodes: list[Target], name: str, *, follow: bool = False, on_line=None, **kw):
    """Every node's log, each line as `[rank R] LINE`, as an Outcome; with follow, as they
    come, from all nodes at once (one follow per node, in parallel), each also handed to
    ON_LINE({"line": ...}) as it comes (the CLI prints it then)."""
    import threading
    lock = threading.Lock()
    got: list[str] = []

    def say(rank: int, line: str) -> None:
        with lock:
            got.append(f"[rank {rank}] {line}")
            if follow and on_line is not None:
                on_line({"line": got[-1]})

    def one(rank: int, t: Target) -> dict:
        if follow:
            return api.logs(t, name, follow=True, on_line=lambda ev: "line" in ev and say(rank, ev["line"]), **kw)
        res = api.logs(t, name, **kw)
        for ln in res.get("lines") or []:
            say(rank, ln)
        return res

    results = each_node(nodes, one)
    failed = [r for r in results if not r["ok"]]
    notes = "\n".join(f"runward logs: node {i} ({nodes[i]}): {r['error']['message']}"
                      for i, r in enumerate(results) if not r["ok"])
    code = max((r["error"].get("exit_code", 1) for r in failed), default=EXIT_OK)
    return Outcome("logs", code, {"ok": code == EXIT_OK, "command": "logs", "target": ",".join(str(t) for t in nodes),
                                  "result": {"name": name, "lines": got,
                                             "nodes": [dict(r, rank=i) for i, r in enumerate(results)]}},
                   None if follow else (lambda: "\n".join(got)), notes=notes or None)


def watch_all(nodes: list[Target], name: str, **kw):
    """Every node's health through the same window, in parallel, as an Outcome: healthy only
    if every node is; an alert names its node (the lines on stderr then)."""
    results = each_node(nodes, lambda _, t: api.watch(t, name, **kw))
    lines, code = [], EXIT_OK
    for i, r in enumerate(results):
        if not r["ok"]:
            lines.append(f"node {i} ({nodes[i]}): {r['error']['message']}")
            code = max(code, r["error"].get("exit_code", 1))
        elif not r["result"].get("healthy"):
            a = r["result"].get("alert") or {}
            lines.append(f"ALERT node {i} ({nodes[i]}): {a.get('detail') or a.get('kind')}")
            code = max(code, 1)
        else:
            lines.append(f"node {i} ({nodes[i]}): healthy for {r['result'].get('watched_s', 0):.0f}s")
    text = "\n".join(lines)
    return Outcome("watch", code, {"ok": code == EXIT_OK, "command": "watch", "target": ",".join(str(t) for t in nodes),
                                   "result": {"name": name, "healthy": code == EXIT_OK,
                                              "nodes": [dict(r, rank=i) for i, r in enumerate(results)]}},
                   (lambda: text) if code == EXIT_OK else None, notes=None if code == EXIT_OK else text)
