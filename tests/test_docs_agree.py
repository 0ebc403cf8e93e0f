"""What the docs and the help say about how runward behaves is what it does (issue 39): the
stop signal's default, the flags docs/history.md names, where nvidia-smi is found, the error
type of an exit during the settle period. Each claim is read from the text a user reads and
held to the behaviour, checked against the target (a file the job writes, /proc), not only
runward's own answer."""

from __future__ import annotations

import re
import signal
import stat
import sys
from pathlib import Path

from runward import cli as runward_cli, errors
from runward.spec import options

import fakegpu
from conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent


def _flags() -> set[str]:
    return {s for _, _, p in runward_cli.verb_parsers() for a in p._actions for s in a.option_strings}


def test_the_stop_signal_default_said_in_help_is_the_one_a_torchrun_run_gets(cli):
    """The help said "default: ... else TERM; INT for torchrun", read as INT being torchrun's
    default; a stop of a job whose program is torchrun sends TERM. The signals the help's
    default names are exactly the one the job received."""
    default = re.search(r"\(default: ([^)]*)\)", options.OPTS["stop_signal"].help).group(1)
    named = set(re.findall(r"\b(TERM|INT|HUP|QUIT|USR1|USR2|KILL)\b", default))
    torchrun = cli.cwd / "torchrun"  # the program's own name is torchrun, as `torchrun --nproc...`
    got = cli.cwd / "got"
    torchrun.write_text(f"#!{sys.executable}\n"
                        "import signal, sys, time\n"
                        "def got(n, f):\n"
                        f"    open({str(got)!r}, 'w').write(signal.Signals(n).name); sys.exit(0)\n"
                        "signal.signal(signal.SIGTERM, got); signal.signal(signal.SIGINT, got)\n"
                        "print('ready', flush=True)\n"
                        "time.sleep(600)\n")
    torchrun.chmod(torchrun.stat().st_mode | stat.S_IXUSR)
    p = cli.run("start", "tr", "--settle", "0.5", "--ready", "^ready", "--", str(torchrun), "--nproc-per-node", "1")
    assert p.returncode == 0, p.stderr
    assert cli.run("stop", "tr", "--grace", "20").returncode == 0
    wait_for(got.exists, timeout=10, what="the job's record of the signal it got")
    received = got.read_text().replace("SIG", "")
    assert received == "TERM" and named == {received}, (options.OPTS["stop_signal"].help, received)


def test_every_flag_docs_history_md_names_is_a_flag_runward_takes():
    """docs/history.md named `--hash-files`, a flag start refuses (exit 2)."""
    text = (ROOT / "docs" / "history.md").read_text()
    named = set(re.findall(r"`[^`]*?(--[a-z][a-z0-9-]+)", text))
    assert named and not named - _flags(), sorted(named - _flags())


def test_the_nvidia_smi_run_is_the_first_on_path_as_docs_gpus_md_says(cli, tmp_path):
    """docs/gpus.md says nvidia-smi is the first one on the agent's PATH, which the GPU stand-in
    relies on: the one `gpus` ran is the stand-in put first on PATH, and one off PATH is not
    found."""
    page = " ".join((ROOT / "docs" / "gpus.md").read_text().split())
    assert "The nvidia-smi called is the first one on the agent's `PATH` on the target" in page
    state = fakegpu.create_state(tmp_path / "smi.json", gpus=2)
    cli.env = fakegpu.env_with_standin(state, cli.env)
    rc, doc = cli.json("gpus")
    assert rc == 0, doc
    ran = doc["result"].get("nvidia_smi") or doc["result"]["targets"][0]["nvidia_smi"]
    assert Path(ran) == fakegpu.STANDIN
    assert len(fakegpu.query_gpus(state)) == 2
    cli.env["PATH"] = "/usr/bin:/bin"  # the stand-in's directory is off PATH: not found
    rc, doc = cli.json("gpus")
    assert "no nvidia-smi on this target" in str(doc), doc


def test_docs_name_exited_early_for_an_exit_during_settle():
    """docs/api.md gave OperationFailed for a job that exits while settling; the API and MCP
    say ExitedEarly. Every sentence of the API and agent docs tying an error type to the settle
    period names the type the code raises there."""
    e = errors.from_agent({"type": "ExitedEarly", "message": "exited during the settle period (exit 3)"})
    for doc in ("api.md", "agents.md"):
        text = " ".join((ROOT / "docs" / doc).read_text().split())
        for sentence in re.findall(r"[^.|]*settl[^.|]*\.?", text):
            types = set(re.findall(r"`([A-Z][a-z]+[A-Z]\w+)`", sentence)) & set(errors.ERROR_TYPES)
            if re.search(r"exit\w* (during|while) (the |its )?settl", sentence) and types:
                assert e.kind in types, (doc, sentence)


def test_docs_cli_md_lists_every_verb_and_flag_as_the_parsers_have_them():
    """docs/cli.md's reference is written from the parsers by scripts/cli-reference: a flag
    added, removed or re-worded without rerunning it fails here."""
    import subprocess
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli-reference"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    text = (ROOT / "docs" / "cli.md").read_text()
    for name, _, parser in runward_cli.verb_parsers():
        assert f"### {name}\n" in text, name
        for a in parser._actions:
            if a.help != "==SUPPRESS==" and a.option_strings and a.dest not in ("help",):
                assert f"`{a.option_strings[0]}" in text, (name, a.option_strings)


def test_readme_test_command_is_the_one_ci_runs():
    """README's second set-up command is the whole test suite, and .ci/run runs exactly it:
    a user who copies it runs what CI runs."""
    blocks = [ln.strip() for ln in (ROOT / "README.md").read_text().splitlines()[:20] if ln.startswith("    ")]
    assert len(blocks) >= 2 and blocks[0].endswith("runward demo"), blocks
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if not ln.lstrip().startswith("#")]
    assert blocks[1] in ci, (blocks[1], ci)
