"""`runward stacks`, this side: ask every node of the run for its capture (agent/health/stacks.py),
merge them into one grouping ("ranks 0,1 in all_reduce (...); rank 2 in ..."), and render it.

Kept out of api.py (already long) so the stacks work merges cleanly; api.stacks calls here."""

from __future__ import annotations

from ..transport import agentcall as transport
from ..agent.health.stackgroup import group, summary
from ..errors import RunwardError


def local_py_spy() -> str | None:
    """The py-spy binary the `stacks` extra's wheel installed here (beside this python), or on PATH."""
    import os
    import shutil
    import sys
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.path.isfile(here) else shutil.which("py-spy")


def bring(target, doc: dict, req: dict) -> dict:
    """A target without py-spy: push this machine's (same architecture only), into runward's
    home there (tools/py-spy), sha256-checked by the push and again by the agent before it
    runs it; then capture again. Anything that stops it is said in the answer, not raised."""
    import platform
    from .. import files
    import hashlib
    spy = local_py_spy()
    if spy is None:
        return dict(doc, bring="no py-spy here to bring: pip install 'runward[stacks]' where runward runs")
    if doc.get("machine") != platform.machine():
        return dict(doc, bring=f"not brought: the target is {doc.get('machine')}, this machine's py-spy is "
                               f"{platform.machine()}; install py-spy there")
    dest = doc["home"].rstrip("/") + "/tools/py-spy"
    try:
        files.push(target, [f"{spy}:{dest}"])
    except RunwardError as e:
        return dict(doc, bring=f"push of py-spy to {dest} failed: {e.message}")
    again = transport.call(target, dict(req, py_spy_sha256=hashlib.sha256(open(spy, "rb").read()).hexdigest()))
    again["brought"] = dest
    return again


def capture(targets: list, name: str, *, native: bool = False, timeout: float = 10.0,
            allow_bring: bool = False) -> dict:
    """Every node's capture (in parallel), merged: `nodes` (each target's own document, or
    its error), and `groups` / `summary` over every process read, each tagged with its node.
    allow_bring: a node without py-spy gets this machine's (bring)."""
    from concurrent.futures import ThreadPoolExecutor
    req = {"op": "stacks", "name": name, "native": native, "timeout": timeout}

    def one(t):
        try:
            d = transport.call(t, dict(req))
            if allow_bring and d.get("error") == "py-spy missing":
                d = bring(t, d, req)
            return d
        except RunwardError as e:
            if len(targets) == 1:
                raise
            return {"ok": False, "error": e.to_dict().get("type"), "hint": e.message, "procs": []}

    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as ex:
        docs = list(ex.map(one, targets))
    if len(docs) == 1:
        docs[0]["target"] = str(targets[0])
        return docs[0]
    procs = []
    for i, (t, d) in enumerate(zip(targets, docs)):
        d["target"] = str(t)
        for p in d.get("procs") or ():
            procs.append(dict(p, node=d.get("node", i)))
    out = {"run": name, "nodes": docs, "procs": procs, "ok": any(d.get("ok") for d in docs),
           "took_s": max((d.get("took_s") or 0) for d in docs)}
    bad = [d for d in docs if not d.get("ok")]
    if not out["ok"] and bad:
        out.update(error=bad[0].get("error"), hint=bad[0].get("hint"))
    out["groups"] = group(procs)
    out["summary"] = summary(out) + "".join(
        "; node %s (%s): %s" % (d.get("node", i), d["target"], d.get("error"))
        for i, d in enumerate(docs) if not d.get("ok") and out["ok"])
    return out


def render(doc: dict) -> str:
    """The summary, then each process: pid, rank, its frame or why it was not read."""
    lines = [doc.get("summary") or "no stacks"]
    for d in [doc, *(doc.get("nodes") or [])]:
        if d.get("bring"):
            lines.append(d["bring"])
        if d.get("brought"):
            lines.append(f"py-spy brought to {d['brought']} (sha256-checked)")
    for p in doc.get("procs") or ():
        who = "rank %s" % p["rank"] if p.get("rank") is not None else p.get("comm") or "?"
        node = " node %s" % p["node"] if p.get("node") is not None and doc.get("nodes") else ""
        f = p.get("frame")
        where = ("%s (%s:%s)" % (f.get("name"), f.get("file"), f.get("line")) if f
                 else "not read: %s (%s)" % (p.get("error"), p.get("hint")))
        nf = p.get("native_frame")  # --native: the C/C++ frame it is in, beside its Python one
        where += "  native: %s (%s)" % (nf.get("name"), nf.get("file")) if nf else ""
        lines.append("  pid %-8s %-10s%s  %s" % (p.get("pid"), who, node, where))
    if doc.get("kept"):
        lines.append("kept: %s" % doc["kept"])
    return "\n".join(lines)
