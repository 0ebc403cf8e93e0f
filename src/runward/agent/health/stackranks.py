"""The ranks a stall's stacks read (health/stall.py): a rank whose main thread is inside a
collective waits for the others, a rank elsewhere is the cause, and a rank whose stack was
not read is neither (docs/diagnosis.md, "Stalls and stragglers"). Stdlib only."""


def name(key, node):
    return key if node is None else "%s (node %s)" % (key, node)


COLLECTIVES = frozenset(("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
                         "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier",
                         "reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "send", "recv",
                         "isend", "irecv", "batch_isend_irecv", "wait"))


def stack_ranks(doc):
    """Each ranked process of a stacks capture: {"rank", "local_rank", "where", "collective"}:
    whether its main thread is inside a collective (a torch.distributed call, or a frame of
    distributed_c10d), where a rank waits for the others."""
    out = []
    for p in doc.get("procs") or ():
        if p.get("rank") is None:
            continue
        if not p.get("frame"):  # a rank whose stack was not read: it may be anywhere
            out.append({"rank": p["rank"], "local_rank": p.get("local_rank"), "collective": None,
                        "unread": p.get("hint") or p.get("error") or "no Python frame read"})
            continue
        main = next((t for t in p.get("threads") or () if t.get("name") == "MainThread"), None) or \
            ((p.get("threads") or [None])[0])
        frames = [f for f in (main or {}).get("frames") or () if not f.get("native")]
        coll = next((f for f in frames if f.get("name") in COLLECTIVES
                     or "distributed_c10d" in (f.get("file") or "")), None)
        f = coll if coll and coll.get("name") in COLLECTIVES else p["frame"]
        out.append({"rank": p["rank"], "local_rank": p.get("local_rank"), "collective": coll is not None,
                    "where": "%s (%s:%s)" % (f.get("name"), f.get("file"), f.get("line"))})
    return out


def by_stacks(stacks, st, node):
    """(suspects, words, "stacks") where the episode's stacks read ranks: a rank inside a
    collective waits, a rank elsewhere is the cause; every rank read in one names those not
    read (they alone can be elsewhere), or none where each was read, said so. (None, None,
    None) where they read no rank: the log's rule and the CPU's stand then."""
    ranks = (stacks or {}).get("ranks") or []
    if not ranks:
        return None, None, None
    local = any(k.startswith("local rank") for k in st.get("ranks") or {})
    key = lambda r: ("local rank %s" % r["local_rank"]) if local and r.get("local_rank") is not None \
        else "rank %s" % r["rank"]  # noqa: E731  (the log's kind of rank, where it shows one)
    unread = [r for r in ranks if r.get("unread")]
    ranks = [r for r in ranks if not r.get("unread")]
    if not ranks:
        return None, None, None  # no rank's stack read: the log's rule and the CPU's stand
    cause = [r for r in ranks if not r["collective"]]
    waiting = [r for r in ranks if r["collective"]]
    said = lambda rs: ", ".join("%s in %s" % (name(key(r), node), r["where"]) for r in rs)  # noqa: E731
    if not cause and unread:
        # "every rank waits in a collective" would be said of the ranks read alone, while the
        # one not read (a rank that exec'd a native tool, or py-spy's failure on it) is the cause
        suspects = sorted(set(key(r) for r in unread))
        return suspects, "; by the stacks, %s waits in a collective, and %s's stack was not read (%s): %s" % (
            said(waiting), ", ".join(name(k, node) for k in suspects),
            "; ".join(sorted(set(r["unread"] for r in unread))),
            "it is the only rank that can be elsewhere" if len(suspects) == 1
            else "they are the only ranks that can be elsewhere"), "stacks"
    if not cause:
        return [], "; by the stacks, every rank waits in a collective (%s): none is elsewhere" % said(waiting), "stacks"
    suspects = sorted(set(key(r) for r in cause))
    return suspects, "; by the stacks, %s %s the cause: %s%s%s" % (
        ", ".join(name(k, node) for k in suspects), "is" if len(suspects) == 1 else "are", said(cause),
        ", while %s" % said(waiting) if waiting else "",
        " (not read: %s)" % ", ".join(sorted(set(name(key(r), node) for r in unread))) if unread else ""), "stacks"
