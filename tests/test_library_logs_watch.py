"""The operations layer (issue 27), verbs logs, watch and plot. `import runward` calls
their operations directly (library.py no longer parses argv for any verb), its documents are
held to the goldens the CLI's are held to, bad keywords are results (exit 2, as the CLI's
flags), and the multi-node paths, which printed to stdout and stderr in one call, say the
same on each stream through the Outcome."""

from __future__ import annotations

import pytest

from conftest import wait_for
from helpers_golden import check, start, stepped


def test_library_logs_is_the_clis_logs_document(cli, tmp_path, lib, no_verb):
    no_verb("logs")
    start(cli, "g-logs")  # test_golden_json.test_logs's run and call
    stepped(cli, "g-logs")
    res = lib.logs("g-logs", lines=2)
    assert res.ok and len(res.lines) == 2, res.to_json()
    check("logs", res.exit_code, res.to_json(), cli, tmp_path)


def test_library_logs_of_no_such_run_is_the_clis_error_document(cli, tmp_path, lib, no_verb):
    no_verb("logs")
    res = lib.logs("g-nosuch")
    assert res.exit_code == 4 and res.error["type"] == "RunNotFound", res.to_json()
    check("err_unknown_run_logs", res.exit_code, res.to_json(), cli, tmp_path)


def test_library_watch_is_the_clis_watch_document(cli, tmp_path, lib, no_verb):
    no_verb("watch")
    start(cli, "g-watch")
    stepped(cli, "g-watch")
    res = lib.watch("g-watch", for_s=1)
    assert res.ok and res.healthy, res.to_json()
    check("watch", res.exit_code, res.to_json(), cli, tmp_path)


def test_a_watch_alert_is_one_answer_on_every_side(cli, lib):
    """The job ended: exit 1, error Alert, the alert text on stderr and nothing on stdout (as
    before), and the library's document the CLI's."""
    rc, doc = cli.json("start", "lw-end", "--settle", "0.5", "--", "sh", "-c", "sleep 1.5; exit 3")
    assert rc == 0, doc
    wait_for(lambda: cli.json("status", "lw-end")[1]["result"]["runs"][0]["state"] == "exited", 30, "the job's end")
    p = cli.run("watch", "lw-end", "--for", "1")
    assert p.returncode == 1 and p.stdout == "" and p.stderr.startswith("ALERT "), p
    rc, doc = cli.json("watch", "lw-end", "--for", "1")
    res = lib.watch("lw-end", for_s=1)
    assert rc == res.exit_code == 1 and doc["error"]["type"] == res.error["type"] == "Alert", (doc, res.to_json())
    assert list(doc) == list(res.to_json()) == ["ok", "command", "target", "result", "error"]
    assert res.alert["kind"] == doc["result"]["alert"]["kind"]


@pytest.mark.parametrize("call, words", [
    (lambda lib: lib.logs("x", lines="abc"), "invalid lines 'abc'"),  # the keyword named, as the CLI names its flag
    (lambda lib: lib.logs("x", lines=-1), "invalid lines -1"),
    (lambda lib: lib.logs("x", offset=2.5), "invalid offset 2.5"),
    (lambda lib: lib.logs("x", grep=3), "invalid grep 3"),
    (lambda lib: lib.logs("x", grep="("), "invalid grep '('"),
    (lambda lib: lib.watch("x", for_s="abc"), "invalid for_s 'abc'"),  # float("abc") raised ValueError out of the API
    (lambda lib: lib.watch("x", for_s=0), "--for"),
    (lambda lib: lib.watch("x", min={"tok_s": "x"}), "--min"),
    (lambda lib: lib.watch("x", stall="soon"), "stall"),
    (lambda lib: lib.watch("x", min=5), "--min"),  # not a mapping: an AttributeError out of the API
    (lambda lib: lib.watch("x", max="tok_s"), "--max"),
])
def test_a_bad_keyword_is_bad_input_as_a_result(cli, lib, call, words):
    res = call(lib)
    assert res.exit_code == 2 and res.error["type"] == "BadInput" and words in res.error["message"], res.to_json()


def test_logs_of_nodes_say_each_node_on_its_stream(cli, lib):
    """Two nodes (the one machine named twice: the same log read twice, once per rank): every
    line under its rank on stdout; a node that fails is named on stderr, the rest still shown,
    and the library's document is the CLI's."""
    rc, doc = cli.json("start", "lw-mn", "--settle", "0.5", "--", "sh", "-c", "echo one; echo two; exec sleep 60")
    assert rc == 0, doc
    wait_for(lambda: "two" in (cli.home / "runs" / "lw-mn" / "log").read_text(), 30, "both lines")
    p = cli.run("logs", "lw-mn", "--on", "local", "--on", "local", "--all-nodes", "-n", "2")
    assert p.returncode == 0 and p.stderr == "", p
    assert sorted(p.stdout.splitlines()) == ["[rank 0] one", "[rank 0] two", "[rank 1] one", "[rank 1] two"], p
    rc, doc = cli.json("logs", "lw-mn", "--on", "local", "--on", "local", "--all-nodes", "-n", "2")
    res = lib.logs("lw-mn", on="local", lines=2)  # the API names one target: that node alone
    assert rc == 0 and sorted(doc["result"]["lines"]) == sorted(p.stdout.splitlines()), doc
    assert res.lines == ["one", "two"], res.to_json()
    p = cli.run("logs", "lw-mn", "--on", "local", "--on", "podman:rw-no-such-ctr", "--all-nodes", "-n", "2")
    assert p.returncode != 0 and p.stdout.splitlines() == ["[rank 0] one", "[rank 0] two"], p
    assert p.stderr.startswith("runward logs: node 1 (podman:rw-no-such-ctr): "), p.stderr
    cli.run("stop", "lw-mn", "--grace", "2")


def test_watch_of_nodes_says_health_on_stdout_and_an_alert_on_stderr(cli):
    rc, doc = cli.json("start", "lw-mw", "--settle", "0.5", "--", "sh", "-c", "exec sleep 60")
    assert rc == 0, doc
    p = cli.run("watch", "lw-mw", "--on", "local", "--on", "local", "--all-nodes", "--for", "1")
    assert p.returncode == 0 and p.stderr == "", p
    assert p.stdout.splitlines() == ["node 0 (local): healthy for 1s", "node 1 (local): healthy for 1s"], p
    cli.run("stop", "lw-mw", "--grace", "2")
    p = cli.run("watch", "lw-mw", "--on", "local", "--on", "local", "--all-nodes", "--for", "1")
    assert p.returncode == 1 and p.stdout == "", p
    assert [ln.split(":")[0] for ln in p.stderr.splitlines()] == ["ALERT node 0 (local)", "ALERT node 1 (local)"], p


def test_the_operation_of_nodes_is_the_clis_answer(cli, lib):
    """The multi-node paths build, not print: the operation's Outcome (document, stdout text,
    stderr notes) called in this process is what the CLI shows, on each stream, for every
    node answering and for one node failing among others."""
    from runward.library import _plain
    from runward.operations.logs import LogsOptions, logs
    from runward.operations.watch import WatchOptions, watch
    rc, doc = cli.json("start", "lw-mo", "--settle", "0.5", "--", "sh", "-c", "echo one; echo two; exec sleep 60")
    assert rc == 0, doc
    wait_for(lambda: "two" in (cli.home / "runs" / "lw-mo" / "log").read_text(), 30, "both lines")
    for on in (["local", "local"], ["local", "podman:rw-no-such-ctr"]):
        flags = [w for t in on for w in ("--on", t)]
        got = logs(LogsOptions(name="lw-mo", on=on[0], nodes=on, all_nodes=True, n=2))
        p = cli.run("logs", "lw-mo", *flags, "--all-nodes", "-n", "2")
        assert (p.returncode, sorted(p.stdout.splitlines())) == (got.code, sorted(got.render().splitlines())), p
        assert p.stderr == (got.notes + "\n" if got.notes else ""), (p.stderr, got.notes)
        rc, doc = cli.json("logs", "lw-mo", *flags, "--all-nodes", "-n", "2")
        mine = _plain(got.document)
        for d in (doc, mine):
            d["result"]["lines"].sort()
        assert (rc, doc) == (got.code, mine)
    got = watch(WatchOptions(name="lw-mo", on="local", nodes=["local", "local"], all_nodes=True, for_s=1))
    p = cli.run("watch", "lw-mo", "--on", "local", "--on", "local", "--all-nodes", "--for", "1")
    assert (p.returncode, p.stdout, p.stderr) == (got.code, got.render() + "\n", ""), p
    cli.run("stop", "lw-mo", "--grace", "2")


def test_the_library_runs_no_verb_through_argv():
    """library.py has no argv path left (it had _call, _VERB_MODULES and a parser per verb)."""
    import runward.library as library
    for gone in ("_call", "_VERB_MODULES", "_Captured", "_parser", "_opt", "_num", "_limits"):
        assert not hasattr(library, gone), gone


def test_library_plot_is_the_clis_plot_document(cli, tmp_path, lib, no_verb):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install -e '.[plot]')")
    no_verb("plot")
    start(cli, "g-plot")  # test_golden_json.test_plot's run and call
    stepped(cli, "g-plot")
    res = lib.plot("g-plot", str(tmp_path / "g.png"))
    assert res.ok and (tmp_path / "g.png").stat().st_size > 0, res.to_json()
    check("plot", res.exit_code, res.to_json(), cli, tmp_path)
    bad = lib.plot("g-plot", str(tmp_path / "h.png"), x="sideways")
    assert bad.exit_code == 2 and "--x" in bad.error["message"] and not (tmp_path / "h.png").exists(), bad.to_json()
