"""`runward demo`: the whole story on this machine with the bundled example job.

Runs in a scratch state directory so it never touches your runs. Each step prints what
runward verified; the demo fails (exit 1) if any promise does not hold.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ..errors import RunwardError
from ..views.render import render_start, render_status, render_stop
from ..targets import Target

RUN = "demo-train"


def example_job() -> Path:
    """examples/train.py from the checkout, or the copy installed with the package."""
    package = Path(__file__).resolve().parent.parent  # src/runward
    for cand in (package.parent.parent / "examples" / "train.py", package / "examples" / "train.py"):
        if cand.is_file():
            return cand
    raise RunwardError("the example job (examples/train.py) was not found", "run the demo from a checkout")


class Story:
    def __init__(self, out):
        self.out = out
        self.steps: list[dict] = []
        self.t0 = time.monotonic()

    def step(self, title: str) -> None:
        self.out.say(f"\n== {title}  [{time.monotonic() - self.t0:5.1f}s]")

    def record(self, name: str, ok: bool, **detail) -> None:
        self.steps.append({"step": name, "ok": ok, **detail})
        if not ok:
            self.out.say(f"!! {name}: not as promised: {detail}")


def add_arguments(p) -> None:
    p.add_argument("--keep", action="store_true", help="keep the demo's state directory")


def run(args, out) -> int:
    """The story in a scratch RUNWARD_HOME (restored after), the example job's run stopped
    whatever happens; exit 1 unless every promise held."""
    from .. import api
    keep = args.keep
    scratch = tempfile.mkdtemp(prefix="runward-demo-")
    old_home = os.environ.get("RUNWARD_HOME")
    os.environ["RUNWARD_HOME"] = os.path.join(scratch, "home")
    target = Target(())
    story = Story(out)
    job = example_job()
    workdir = os.path.join(scratch, "work")
    os.makedirs(workdir)
    env = {"TRAIN_STEP_SECONDS": "0.1", "TRAIN_PROFILE_INTERVAL": "20", "TRAIN_CHECKPOINT_DIR": workdir}
    try:
        _lifecycle(story, target, job, workdir, env)
        _lint_crash_stop(story, target, job, workdir, env)
    except RunwardError as e:
        story.record("error", False, message=e.message, hint=e.hint)
    finally:
        try:
            api.stop(target, RUN, grace=5)
        except RunwardError:
            pass
        if old_home is None:
            os.environ.pop("RUNWARD_HOME", None)
        else:
            os.environ["RUNWARD_HOME"] = old_home
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    ok = all(s["ok"] for s in story.steps)
    out.say(f"\ndemo {'passed' if ok else 'FAILED'}: {sum(s['ok'] for s in story.steps)}/{len(story.steps)} "
            f"promises held in {time.monotonic() - story.t0:.1f}s" + (f" (state kept in {scratch})" if keep else ""))
    out.doc({"ok": ok, "command": "demo", "result": {"steps": story.steps, "scratch": scratch if keep else None}})
    return 0 if ok else 1


def _lifecycle(story: Story, target: Target, job: Path, workdir: str, env: dict) -> None:
    """start, status, health and watch, then a restart into a NaN that watch catches."""
    from .. import api
    out = story.out
    story.step("start: launch the example job, verified alive after settling")
    out.say(f"$ runward start {RUN} --settle 2 --ready '^step 1 ' -- {sys.executable} {job}")
    res = api.start(target, RUN, argv=[sys.executable, str(job)], cwd=workdir, env=env, settle=2.0,
                    ready=r"^step 1 ")
    out.say(render_start(res))
    story.record("start", res.get("alive_after_settle") is True, pid=res["pid"])

    story.step("status: the whole tree (main, workers, and a worker that escaped with setsid)")
    st = api.status(target, [RUN])
    out.say(render_status(st, "local"))
    tree = st["runs"][0].get("tree", {})
    story.record("status", st["runs"][0]["state"] == "running" and tree.get("processes", 0) >= 3,
                 processes=tree.get("processes"))

    story.step("health: metrics read from the log where it lives, then `watch` through a window")
    from ..views.health import sparkline
    h = api.health(target, RUN)
    out.say(f"metrics: {h['metrics']}  {h['throughput_metric']}: {sparkline(h['throughput_series'])}")
    out.say(f"$ runward watch {RUN} --for 2 --min tok_s=10000")
    w = api.watch(target, RUN, for_s=2.0, rules={"min": {"tok_s": 10000}})
    out.say(f"healthy through {w['watched_s']:.1f}s" if w["healthy"] else f"alert: {w['alert']}")
    story.record("metrics", h.get("throughput_metric") == "tok_s" and w["healthy"], metrics=h["metrics"])

    story.step("restart with a setting that makes the loss NaN: a verified stop, a verified start")
    out.say(f"$ runward restart {RUN} --env TRAIN_NAN_AT=15")
    res = api.restart(target, RUN, overrides={"env": {"TRAIN_NAN_AT": "15"}, "settle": 1.0,
                                              "reuse_env": True})
    stop_res = res["steps"][0]["result"]
    out.say(render_stop(stop_res))
    out.say(render_start(res["steps"][-1]["result"]))
    story.record("restart", stop_res["verified_dead"] and res["attempt"] == 2, attempt=res["attempt"])
    out.say(f"$ runward watch {RUN} --for 30")
    w = api.watch(target, RUN, for_s=30.0)
    from ..views.health import format_alert
    out.say("ALERT " + format_alert(w["alert"]) if not w["healthy"] else "no alert (unexpected)")
    story.record("nan caught by watch", not w["healthy"] and w["alert"]["kind"] == "nan")


def _lint_crash_stop(story: Story, target: Target, job: Path, workdir: str, env: dict) -> None:
    """the linter on the self-killing one-liner, an early crash reported at once, the stop."""
    from .. import api
    out = story.out
    story.step("lint: the self-killing one-liner, caught before it runs")
    from .. import lint as _lint
    line = "ssh root@host \"pct exec 200 -- bash -lc 'pkill -f train.py; nohup python3 train.py > log 2>&1 &'\""
    out.say(f"$ runward lint {line!r}")
    findings = _lint.lint(line)
    out.say(_lint.format_findings(line, findings))
    story.record("lint", any(f.severity == "error" and f.rule == "self-kill" for f in findings))

    story.step("crash: a job that dies at once is reported at once, with its exit code and log tail")
    t = time.monotonic()
    try:
        api.start(target, "demo-crash", argv=[sys.executable, str(job)], cwd=workdir,
                  env={**env, "TRAIN_CRASH_AT": "3", "TRAIN_STEP_SECONDS": "0.05"}, settle=30.0)
        story.record("crash", False, reason="start did not report the crash")
    except RunwardError as e:
        took = time.monotonic() - t
        out.say(f"start failed as it should, after {took:.2f}s of a 30s settle: {e.message}")
        for ln in (e.result or {}).get("last_lines", [])[-4:]:
            out.say(f"    | {ln}")
        story.record("crash", took < 10 and (e.result or {}).get("exit", {}).get("code") == 1, seconds=round(took, 2))

    story.step("stop: TERM to every process of the run, the job checkpoints, every process verified dead")
    res = api.stop(target, RUN, grace=10)
    out.say(render_stop(res))
    story.record("stop", res["verified_dead"], processes=len(res["processes"]))
    ckpts = sorted(Path(workdir).glob("ckpt-*.json"))
    out.say(f"checkpoint written on TERM: {ckpts[-1].name if ckpts else 'none'}")
    story.record("checkpoint", bool(ckpts))
