"""A run over several nodes (docs/multinode.md): one ordinary run of the same name on each
node, any target each, started all or nothing, stopped everywhere, watched by the targets.

Each node's start request carries its part ("multinode": run id, rank, nnodes, the node
list, master address and ports, on_node_failure), which the target keeps in the attempt
record: `status NAME --on ANY-NODE` finds the others from it, and the nodes' shims watch
each other through it (agent/supervise/peers.py). The job gets the rank environment, and the
placeholders {node_rank} {nnodes} {master_addr} {master_port} in its argv words are
expanded per node (never through a shell)."""

from __future__ import annotations

from .. import api
from ..transport import agentcall as transport
from ..transport.fanout import fan_out_runs, join, worst_code
from ..errors import EXIT_FAILED, EXIT_OK, BadInput, NotStarted, RunNotFound, RunwardError
from ..spec.options import OPTS
from ..targets import Target, parse_target

PLACEHOLDERS = ("node_rank", "nnodes", "master_addr", "master_port")
POLICIES = OPTS["on_node_failure"].choices  # stop, continue
# failures of a node's start after which nothing of this start runs there: refused before
# anything was launched (bad input), because a run of that name was already alive there,
# which is not ours to stop, or its request never sent (errors.NotStarted)
_NOT_LAUNCHED = ("BadInput", "AlreadyRunning", "NotStarted")


def nodes_from_record(found: dict | None) -> list[Target] | None:
    """The nodes a node's record names (its status or stop result's "multinode")."""
    mn = (found or {}).get("multinode") or {}
    if int(mn.get("nnodes") or 1) < 2:
        return None
    return [parse_target(t["on"], label=t.get("label"), home=t.get("home"), python=t.get("python"))
            if isinstance(t, dict) else parse_target(t) for t in mn.get("nodes") or []]


def _node_ref(t: Target) -> dict:
    """A node as its record keeps it: enough for any node to reach the others as we do."""
    return {k: v for k, v in (("on", str(t)), ("label", t.label), ("home", t.home), ("python", t.python)) if v}


def _check_nodes(nodes: list[Target]) -> None:
    seen = set()
    for t in nodes:
        if (str(t), t.home) in seen:
            raise BadInput(f"node {t} is given twice", "each node of a run once: one run per target per name")
        seen.add((str(t), t.home))


def each_node(nodes: list[Target], fn) -> list[dict]:
    """fn(rank, node) on every node in parallel: {"ok", "result" | "error"} per rank, in order."""
    return fan_out_runs([(str(i), t) for i, t in enumerate(nodes)], lambda i, t: fn(int(i), t))


def expand(argv: list[str] | None, values: dict) -> list[str] | None:
    """{node_rank} {nnodes} {master_addr} {master_port} in argv words; other braces stay."""
    if argv is None:
        return None
    out = []
    for word in argv:
        for k in PLACEHOLDERS:
            word = word.replace("{" + k + "}", str(values[k]))
        out.append(word)
    return out


def rank_env(rank: int, nnodes: int, addr: str, port: int, ips: list[str], nproc: int | None) -> dict:
    env = {"NODE_RANK": str(rank), "NNODES": str(nnodes), "MASTER_ADDR": addr, "MASTER_PORT": str(port),
           "RUNWARD_NODE_IPS": ",".join(ips), "RUNWARD_NODE_RANK": str(rank)}
    if nproc:
        env["WORLD_SIZE"] = str(nnodes * int(nproc))
        env["NPROC_PER_NODE"] = str(nproc)
    return env


def _probe(nodes: list[Target]) -> list[dict]:
    """Every node at once: reachable, its address as we reach it; node 0 also picks two free
    ports (the master's and the coordinator's) in its own network namespace."""
    return each_node(nodes, lambda i, t: transport.call(t, {"op": "free_ports", "count": 2 if i == 0 else 0}))


def _address(t: Target, probe: dict) -> str:
    """A node's address as the others reach it: where our ssh landed (SSH_CONNECTION),
    else the ssh hop's host, else this machine's loopback (a local or container target)."""
    if probe.get("address"):
        return probe["address"]
    ssh = next((h for h in t.hops if h.kind == "ssh"), None)
    return ssh.name if ssh is not None else "127.0.0.1"


def start(nodes: list[Target], name: str, kw: dict, *, master_addr: str | None = None,
          nproc_per_node: int | None = None, on_node_failure: str = "stop", on_event=None,
          gates: list[dict] | None = None) -> tuple[dict, int]:
    """Start NAME on every node in parallel, all or nothing: (result, exit code).

    gates (restart, restartgate.node_gates): one per node; each node's attempt then waits on
    its target until every node's GPUs are released (agent/supervise/gatebarrier.py), and the result
    says blocked (exit 5).

    Each node's start is under way (its ssh session, its agent loaded) while every node is
    probed: its request, which needs the probe's addresses and ports, is sent once the probe
    is done (transport.call's late), and never when a node was not reachable."""
    import threading
    _check_nodes(nodes)
    if on_node_failure not in POLICIES:
        raise BadInput(f"invalid on_node_failure {on_node_failure!r}", "use stop or continue")
    n = len(nodes)
    probed, plan = threading.Event(), {}

    def one(rank: int, t: Target) -> dict:
        def late(req: dict) -> None:
            probed.wait()
            if not plan:
                raise NotStarted(f"node {rank}: not sent, since not every node was reachable")
            addr, port = plan["addr"], plan["ports"][0]
            values = {"node_rank": rank, "nnodes": n, "master_addr": addr, "master_port": port}
            req["argv"] = expand(kw.get("argv"), values)
            req["env"] = {**req["env"], **rank_env(rank, n, addr, port, plan["ips"], nproc_per_node),
                          "RUNWARD_MULTINODE_ID": plan["id"]}
            req["multinode"] = dict(plan["part"], rank=rank)
        return api.start(t, name, on_event=on_event, late=late, gate=gates[rank] if gates else None, **kw)

    results: list[dict] = []
    starts = threading.Thread(target=lambda: results.extend(each_node(nodes, one)), daemon=True)
    starts.start()
    try:
        probes = _probe(nodes)
        if all(p["ok"] for p in probes):
            ports = probes[0]["result"]["ports"]
            ips = [_address(t, p["result"]) for t, p in zip(nodes, probes)]
            import secrets  # here, not at the top: every status and stop of a named run imports this module
            run_id = secrets.token_hex(6)
            addr = master_addr or ips[0]
            plan.update(id=run_id, addr=addr, ports=ports, ips=ips, part={
                "id": run_id, "secret": secrets.token_hex(16), "nnodes": n, "nodes": [_node_ref(t) for t in nodes], "master_addr": addr,
                "master_port": ports[0], "coord_port": ports[1], "on_node_failure": on_node_failure})
    finally:
        probed.set()
        interrupted = join([starts])  # every start to its end (a request sent or not): then roll back
    res = {"name": name, "nnodes": n, "state": "not started",
           "nodes": [{"rank": i, "target": t.display(), **_outcome(p)} for i, (t, p) in enumerate(zip(nodes, probes))]}
    if not plan:
        res["message"] = "not every node was reachable: nothing was started"
        return res, EXIT_FAILED
    res.update(run_id=plan["id"], master_addr=plan["addr"], master_port=plan["ports"][0],
               coord_port=plan["ports"][1], on_node_failure=on_node_failure)
    if interrupted:
        results = [{"ok": False, "error": {"type": "Interrupted", "message": "interrupted", "exit_code": 130}}
                   for _ in nodes]
    res["nodes"] = [{"rank": i, **_outcome(r), "target": t.display()} for i, (t, r) in enumerate(zip(nodes, results))]
    if all(r["ok"] for r in results) and gates:
        return _blocked(res)
    if all(r["ok"] for r in results):
        res.update(state="running", verified=["every_node_alive_after_settle"])
        return res, EXIT_OK
    _roll_back(nodes, name, res)
    return res, EXIT_FAILED if res["rolled_back_verified"] else 5


def _blocked(res: dict) -> tuple[dict, int]:
    """Every node's attempt waits on its target for the GPUs (a restart's gate): exit 5,
    nothing verified alive yet; each node starts by itself once every node's are released."""
    held = [r for r in res["nodes"] if (r["result"].get("blocked") or {}).get("holders")]
    why = "; ".join((r["result"].get("blocked") or {}).get("why") or "" for r in held) or \
        ((res["nodes"][0]["result"].get("blocked") or {}).get("why") or "GPUs not released")
    res.update(state="blocked", message=f"{res['name']}: blocked: {why}; every node starts by itself once every "
               f"node's GPUs are released; `runward stop {res['name']}` cancels")
    return res, 5


def _outcome(r: dict) -> dict:
    return {"ok": True, "result": r["result"]} if r["ok"] else {"ok": False, "error": r["error"],
                                                                  **({"result": r["result"]} if r.get("result") else {})}


def _roll_back(nodes: list[Target], name: str, res: dict) -> None:
    """A node failed to start: stop (verified) every node where this start may have
    launched something: all but those refused before launching."""
    todo = [(i, t) for i, t in enumerate(nodes)
            if res["nodes"][i]["ok"] or res["nodes"][i]["error"]["type"] not in _NOT_LAUNCHED]
    stops = each_node([t for _, t in todo], lambda _, t: _stop_node(t, name))
    for (i, _), s in zip(todo, stops):
        res["nodes"][i]["rollback"] = s["result"] if s["ok"] else {"error": s["error"], "verified_dead": False}
    failed = [f"node {i} ({r['target']}): {r['error']['message']}" for i, r in enumerate(res["nodes"]) if not r["ok"]]
    if not todo:  # every node refused before launching anything: nothing to roll back
        res.update(state="not started", rolled_back_verified=True,
                   message="start refused on " + "; ".join(failed) + "; nothing was started or stopped")
        return
    res["state"] = "rolled back"
    res["message"] = "start failed on " + "; ".join(failed) + "; every node that started was stopped"
    res["rolled_back_verified"] = all((r.get("rollback") or {}).get("verified_dead", True) for r in res["nodes"])
    if not res["rolled_back_verified"]:
        res["message"] = res["message"].replace("was stopped", "was asked to stop, and not every stop was verified")


def _not_reached(name: str, cut: list[dict]) -> str:
    """What a stop that could not reach some nodes leaves: their jobs, still running."""
    which = ", ".join(f"node {r['rank']} ({r['target']})" for r in cut)
    return (f"{which} not reached: its job was not stopped by this stop and may still run. It stops itself once "
            f"it hears of node 0's stop, or, with on_node_failure = \"stop\", once it finds node 0's coordinator "
            f"gone (its link silent about 45 to 55 s, or refused once the link is back: peers.REJOIN_S); "
            f"`runward status {name}` shows it, `runward stop {name}` again verifies its end")


def _given(r):
    """A node `stop --on ONE-NODE` already stopped: its result, or its error (not verified)
    raised again so the fan-out makes its row as it would have."""
    if isinstance(r, BaseException):
        raise r
    return r


def _stop_node(t: Target, name: str, **kw) -> dict:
    try:
        return api.stop(t, name, **kw)
    except RunNotFound:
        return {"name": name, "verified_dead": True, "already_stopped": True, "never_started": True,
                "processes": [], "verified": ["no_record_on_target"]}


def stop(nodes: list[Target], name: str, checkpoint: dict | None = None, done: dict | None = None,
         **kw) -> tuple[dict, int]:
    """Every node at once, each verified dead: (result with each node's fate, exit code).
    checkpoint: first every node's checkpoint signal and wait (multinode/checkpoint.py), then the stop.
    done: {rank: result} of nodes this stop already stopped (`stop --on ONE-NODE`): their
    verified result is the row; a second stop there would answer for something else (a
    blocked attempt's cancelled node would wait for GPUs it never held, 67 s, exit 5)."""
    ckpt = None
    if checkpoint is not None:
        from . import checkpoint as multickpt
        ckpt = multickpt.before_stop(nodes, name, checkpoint, kw.get("lock_timeout"))
    done = done or {}
    results = each_node(nodes, lambda i, t: _given(done[i]) if i in done else _stop_node(t, name, **kw))
    rows = [{"rank": i, **_outcome(r), "target": t.display()} for i, (t, r) in enumerate(zip(nodes, results))]
    _ended_by_this_stop(rows)
    ok = all(r["ok"] for r in rows)
    res = {"name": name, "nnodes": len(nodes), "nodes": rows, "verified_dead": ok}
    cut = [r for r in rows if not r["ok"] and r["error"].get("type") == "Unreachable"]
    if cut:
        res["note"] = _not_reached(name, cut)
    if ckpt is not None:
        res["checkpoint"] = ckpt
    if ok:
        res["verified"] = ["every_node_dead"]
    return res, worst_code(rows)


def _ended_by_this_stop(rows: list[dict]) -> None:
    """This stop signals every node at once, and node 0's end by it goes to the other nodes
    over their link as a stop of the whole run: a node's shim may end its job before this
    stop's own call reaches it (a slower hop, a loaded host). Which came first is timing;
    either way this stop ended the job, so the row says so alike ("ended_by": "whole_run_stop").
    Only where this stop itself ended node 0's job: a whole-run word from an earlier stop
    would have ended node 0 too."""
    first = rows[0].get("result") or {} if rows and rows[0]["ok"] else {}
    if first.get("already_stopped") is not False:
        return
    for r in rows[1:]:
        res = r.get("result") or {}
        if r["ok"] and res.get("already_stopped") and (res.get("peer_stop") or {}).get("whole"):
            res["ended_by"] = "whole_run_stop"


def status(nodes: list[Target], name: str) -> tuple[dict, int]:
    """One status per node and the aggregate: running only when every node runs."""
    results = each_node(nodes, lambda _, t: api.status(t, [name]))
    rows = []
    for i, (t, r) in enumerate(zip(nodes, results)):
        row = {"rank": i, "target": t.display(), "ok": r["ok"]}
        if r["ok"]:
            row["run"] = (r["result"].get("runs") or [{}])[0]
            row["state"] = row["run"].get("state")  # the node's own state, as top and its status say it
            if row["state"] == "exited" and _failed_exit(row["run"]):
                row["failed"] = True  # the node's job failed by itself: the run's aggregate is "failed"
        else:
            row["error"] = r["error"]
            row["state"] = "not here" if r["error"]["type"] == "RunNotFound" else "unreachable"
        rows.append(row)
    states = ["failed" if r.get("failed") else r["state"] for r in rows]
    res = {"name": name, "nnodes": len(nodes), "state": aggregate(states), "nodes": rows}
    from .verdict import stall_verdict, verdict
    v = verdict(rows)  # one root cause across the nodes (docs/diagnosis.md)
    if v is not None:
        res["attribution"] = v
    s = stall_verdict(rows)  # which node stopped first
    if s is not None:
        res["stall"] = s
    ids = {((r.get("run") or {}).get("multinode") or {}).get("id") for r in rows if r["ok"]}
    if len(ids - {None}) > 1:
        res["note"] = "the nodes' records name different multi-node starts (run ids): not one run"
    if all(r["error"]["type"] == "RunNotFound" for r in rows if not r["ok"]) and not any(r["ok"] for r in rows):
        return res, 4
    unreachable = [r for r in rows if not r["ok"] and r["error"]["type"] != "RunNotFound"]
    return res, (unreachable[0]["error"].get("exit_code", 3) if unreachable else EXIT_OK)


def _failed_exit(run: dict) -> bool:
    """A node's job that ended by itself with a failure (not stopped by `stop` or its peers)."""
    ex = run.get("exit") or {}
    return not run.get("stop_requested") and (ex.get("signal") is not None or ex.get("code") not in (0, None))


def aggregate(states: list[str]) -> str:
    """running only when every node runs; failed if any node failed; else the one state
    they share, or "partial" (some run, some do not)."""
    if all(s == "running" for s in states):
        return "running"
    if any(s == "failed" for s in states):
        return "failed"
    if len(set(states)) == 1:
        return states[0]
    return "partial" if "running" in states else "stopped" if all(s in ("exited", "stopped") for s in states) \
        else "mixed"


def discover(target: Target, name: str) -> list[Target] | None:
    """The nodes of NAME as the record on TARGET names them (one status call), or None."""
    try:
        st = api.status(target, [name])
    except RunwardError:
        return None
    return nodes_from_record((st.get("runs") or [{}])[0])
