"""The `stacks` op: the Python stacks of a run's processes on this target (agent/health/stacks.py),
kept beside the run's records and answered."""

from ..health import stacks as cap
from ..core import launchers
from ..core.store import RunStore
from ..core.wire import AgentFailure


def stacks(req, home):
    store = RunStore.existing(home, req.get("name"))
    att = store.latest()
    if not att:
        raise AgentFailure("RunNotFound", "run %s has no attempt on this target" % store.name,
                           "`runward start %s` first" % store.name)
    # an engine's processes of the job outside its tree and marker (workers the engine started): core/NAME.py's job_workers
    name = launchers.named(att)
    q = launchers.queries(name) if name else None
    if hasattr(q, "adopt"):  # a start interrupted before it saw the driver: found and named now
        att = q.adopt(store, att)
    ws = q.job_workers(att) if hasattr(q, "job_workers") else None
    doc = cap.capture(att, native=bool(req.get("native")), timeout=float(req.get("timeout") or 10.0),
                      home_dir=home.path, want=req.get("py_spy_sha256"), extra=ws and ws["here"])
    if ws:  # an engine's word on the job's processes beside the tree: each one's role, those out of sight
        q.stack_said(ws, doc)
    doc["home"] = home.path  # where --bring-py-spy puts runward's own copy (tools/py-spy)
    try:
        doc["kept"] = cap.keep(att, doc, home)
    except OSError as e:  # a read-only or full home: the answer stands, unkept, and says so
        doc["kept_error"] = str(e)
    return doc
