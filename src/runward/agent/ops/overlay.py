"""overlay: the metric points of several attempts of one run ([step, throughput, loss] each),
for `runward plot NAME --attempts 5,6,7`. Read here, one round trip: the logs stay on the
target, only the points travel."""

from ..health.attempts import facts
from ..core.logselect import attempt_of
from ..core.store import RunStore
from ..core.wire import bad_input

MAX_ATTEMPTS = 12  # lines on one figure at most: more is unreadable


def overlay(req, home):
    store = RunStore.existing(home, req.get("name"))
    wanted = req.get("attempts") or []
    if not wanted or len(wanted) > MAX_ATTEMPTS:
        raise bad_input("--attempts %s: give 1 to %d attempts" % (",".join(map(str, wanted)), MAX_ATTEMPTS),
                        "e.g. --attempts 5,6,7 (see `runward history %s`)" % store.name)
    rows = []
    for n in wanted:
        f = facts(store, attempt_of(store, n), "", True)  # no such attempt: RunNotFound, exit 4
        s = f.get("series") or {}
        if not s.get("points"):
            raise bad_input("attempt %s of %s has no metrics in its log: nothing to plot" % (n, store.name),
                            "leave it out of --attempts (`runward history %s` shows what each printed)" % store.name)
        rows.append({"attempt": f["attempt"], "step": s["step"], "throughput": s["throughput"],
                     "loss": s["loss"], "points": s["points"]})
    return {"name": store.name, "attempts": rows}
