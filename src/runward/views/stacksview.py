"""`runward stacks`, this side: the merged capture of every node (api.stacks asks and merges,
grouped by frame and rank: "ranks 0,1 in all_reduce (...); rank 2 in ...") said for people."""

from __future__ import annotations


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
