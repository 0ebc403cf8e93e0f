"""`runward completion bash|zsh`, loaded into the real shells: verbs, each verb's flags (from
the real parsers), run names and target names from runward.toml."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.fixture
def project(cli, tmp_path):
    """runward on PATH (the scripts call it back for names) and a project with runs and targets."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "runward").write_text(f'#!/bin/sh\nexec {sys.executable} -m runward "$@"\n')
    (bindir / "runward").chmod(0o755)
    (tmp_path / "runward.toml").write_text(
        '[targets.gpu1]\non = "ssh://gpu1"\n\n[targets.box]\non = "ssh://box"\n\n'
        '[runs.train]\non = "gpu1"\ncommand = ["python3", "train.py"]\n\n[runs.evaluate]\ncommand = ["true"]\n')
    (tmp_path / "other.toml").write_text('[runs.other1]\ncommand = ["true"]\n')
    cli.env.update(PATH=f"{bindir}{os.pathsep}{cli.env['PATH']}", PYTHONPATH=str(ROOT / "src"))
    return cli


BASH_PROBE = r'''
source <(runward completion bash)
complete -p runward
t() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _runward; echo "$*|${COMPREPLY[*]}"; }
t runward st
t runward stop ""
t runward stop --g
t runward start --on ""
t runward start train --log-
t runward restart --config ../other.toml ""
t runward start train -- py
t runward completion ""
t runward stop --grace ""
'''


def test_bash_completes_verbs_flags_and_names(project):
    p = subprocess.run(["bash", "-c", BASH_PROBE], cwd=project.cwd, env=project.env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "complete -o default -F _runward runward"
    got = dict(ln.split("|", 1) for ln in lines[1:])
    assert got["runward st"].split() == ["start", "stop", "status", "stacks"]
    assert got["runward stop "].split() == ["evaluate", "train"]
    assert got["runward stop --g"].split() == ["--grace", "--gpu-release-timeout"]  # old spellings hidden
    assert got["runward start --on "].split() == ["local", "box", "gpu1"]
    assert got["runward start train --log-"].split() == ["--log-max", "--log-keep"]
    assert got["runward restart --config ../other.toml "].split() == ["other1"]  # the line's --config
    assert got["runward start train -- py"] == ""      # the job's command: the shell's own completion
    assert got["runward completion "].split() == ["bash", "zsh"]
    assert got["runward stop --grace "] == ""          # a value, not a name


def test_the_script_follows_the_parsers(project):
    """Every public flag of every verb is in the script, no hidden one (an old spelling kept
    for a release); the hidden verb is not offered."""
    import argparse

    from runward import cli
    script = project.run("completion", "bash").stdout
    for name, _, parser in cli.verb_parsers():
        line = next(ln for ln in script.splitlines() if ln.strip().startswith(f"{name}) echo"))
        offered = line.split("'")[1].split()
        for a in parser._actions:
            for flag in a.option_strings:
                assert (flag in offered) == (a.help != argparse.SUPPRESS), (name, flag)
    verbs = re.search(r"_runward_verbs='([^']*)'", script).group(1).split()
    assert verbs == [v[0] for v in cli.VERBS] and "_complete" not in verbs
    assert "_complete" not in project.run("--help").stdout


def test_hidden_names_verb_is_quiet_on_a_broken_config(project, tmp_path):
    assert project.run("_complete", "targets").stdout.split() == ["box", "gpu1"]
    (tmp_path / "runward.toml").write_text("[runs.x\n")
    p = project.run("_complete", "runs")
    assert p.returncode == 0 and p.stdout == "" and p.stderr == ""


# Each Tab's answer is waited for (zpty -r with a pattern reads until what it has read
# matches), never a fixed sleep: `runward _complete` is a process start, slow on a loaded box.
ZSH_PROBE = r'''
zmodload zsh/zpty
zpty z 'zsh -f -i'
zpty -w z 'PS1="> "; autoload -U compinit; compinit -u -D; eval "$(runward completion zsh)"; unsetopt beep'
zpty -w z 'print -r -- "registered:$_comps[runward]"'
lines=('runward st' 'runward stop ' 'runward start --on ' 'runward stop --gr')
answers=('*start a run*' '*train*' '*gpu1*' '*--gr*ace*')
out=
for i in {1..4}; do
    zpty -w -n z "$lines[i]"$'\t'
    zpty -r z chunk "$answers[i]" && out+=$chunk
    zpty -w -n z $'\C-u'
done
zpty -d z
print -r -- "${out//$'\e'\[[0-9;?]#[a-zA-Z]/}"
'''


def test_zsh_completes_verbs_names_and_flags(project):
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed (scripts/ci-install.sh installs it)")
    script = project.run("completion", "zsh").stdout
    assert subprocess.run(["zsh", "-n"], input=script, text=True, capture_output=True).returncode == 0
    p = subprocess.run(["zsh", "-f", "-c", ZSH_PROBE], cwd=project.cwd, env=project.env, capture_output=True,
                       text=True, timeout=60)
    out = p.stdout.replace("\r", "")
    assert "registered:_runward" in out, out
    assert re.search(r"start\s+-- start a run", out) and re.search(r"status\s+-- state of runs", out), out
    assert re.search(r"evaluate\s+train", out), out            # run names
    assert re.search(r"local\s+box\s+gpu1|box\s+gpu1\s+local", out), out  # target names
    assert "runward stop --grace" in out, out                  # the flag completed in place
