"""Each declared option (src/runward/spec/options.py, issue 27) agrees on every side: the CLI's
flag (argparse, every verb), the Python API's keyword (library.py's signatures), the MCP
tool's parameter (its JSON Schema, from the server the CLI's `runward mcp` builds) and
runward.toml's [runs.NAME] key (a verb reading that run's table refuses a wrong value with
exit 2, naming the file, the table and the key; it reached the agent as a traceback, exit 3, before)."""

from __future__ import annotations

import asyncio
import inspect
import os

import pytest

from runward import cli, library
from runward.spec import config, options
from runward.errors import BadInput

# the same flag name with another meaning: said here, with why, so no other can slip by
ANOTHER_MEANING = {
    ("kill", "grace"): "a stray process's grace (default 10), not a run's",
    ("exec", "cwd"): "the one-off command's directory, with no run and no last attempt",
    ("stop", "checkpoint"): "a switch: checkpoint before the stop; start's --checkpoint is the run's checkpoint glob",
    ("restart", "checkpoint"): "a switch: checkpoint before the stop; start's --checkpoint is the run's checkpoint glob",
    ("stop", "gpu_release_timeout"): "this stop's wait for GPU memory, in seconds; start's is the policy a restart "
                                     "keeps (a duration)",
    ("restart", "gpu_release_timeout"): "this restart's stop's wait for GPU memory, in seconds; start's is the "
                                        "policy a restart keeps (a duration)",
}

TYPES = {"fraction": float, "ratio": float, "seconds": float, "count": int, "regex": str, "signal": str, "text": str, "flag": bool,
         "int": int, "float": float, "choice": str}
SCHEMA = {"fraction": "number", "ratio": "number", "seconds": "number", "count": "integer", "regex": "string", "signal": "string", "text": "string",
          "flag": "boolean"}
BAD = {"fraction": ["half", 0, 1.5, float("nan"), float("inf"), True], "ratio": ["x", 1, -3, float("nan"), float("inf")],
       "seconds": ["soon", -1, float("inf"), True], "count": [2.5, "3", -1], "regex": ["(", 3, ""],
       "signal": ["SIGFOO", 0, ""], "text": ["", 7], "flag": ["yes", 1, None]}
GOOD = {"fraction": 0.5, "ratio": 3.0, "seconds": 2.5, "count": 3, "regex": "^step 1 ", "signal": "INT", "text": "/root/work", "flag": True}


def _declared_by_flag():
    return {f: o for o in options.OPTS.values() for f in (o.flags or (o.flag,))}


def _flags():
    import argparse
    by_flag = _declared_by_flag()
    for verb, _, parser in cli.verb_parsers():
        for a in parser._actions:
            if a.help == argparse.SUPPRESS:
                continue  # a renamed flag's old spelling (verbs/_common.old_spelling): its new one is checked
            for s in a.option_strings:
                if s in by_flag:
                    yield verb, by_flag[s], a
                    break


def test_every_verb_flag_of_a_declared_option_is_the_declaration():
    import argparse
    seen = set()
    for verb, opt, a in _flags():
        if (verb, opt.name) in ANOTHER_MEANING:
            assert a.help != opt.help_for(verb), (verb, opt.name, "declared after all: drop it from ANOTHER_MEANING")
            continue
        seen.add(opt.name)
        assert a.dest == (opt.dest or opt.name) and a.help == opt.help_for(verb), (verb, opt.name, a)
        assert set(opt.flags or (opt.flag,)) <= set(a.option_strings), (verb, opt.name, a.option_strings)
        if opt.kind == "flag":
            assert isinstance(a, argparse._StoreTrueAction) and a.default is False, (verb, opt.name, a)
            continue
        assert a.metavar == opt.metavar, (verb, opt.name, a)
        assert a.type is not None and a.type.__name__ == opt.kind, (verb, opt.name, a.type)
        good = {"fraction": "0.5", "ratio": "3", "seconds": "2.5", "count": "3", "regex": "^s", "signal": "INT", "text": "x",
                "int": "3", "float": "2.5", "word": "x", "choice": (opt.choices or ("",))[0]}[opt.kind]
        assert a.type(good) == {"fraction": 0.5, "ratio": 3.0, "seconds": 2.5, "count": 3, "int": 3, "float": 2.5}.get(
            opt.kind, good), (verb, opt.name)
        assert list(a.choices or ()) == list(opt.choices or ()), (verb, opt.name, a.choices)
        assert isinstance(a, argparse._AppendAction) == opt.append, (verb, opt.name, a)
    assert seen == set(options.OPTS), f"declared, but no verb takes them: {set(options.OPTS) - seen}"


CLI_BAD = {"fraction": ["nan", "inf", "-0.5", "0", "1.5", "x"], "ratio": ["nan", "inf", "-inf", "1", "-3", "x"],
           "seconds": ["soon", "-1", "inf", "nan"], "count": ["2.5", "-1", "x"], "regex": ["(", ""],
           "signal": ["SIGFOO", "0", ""], "text": ["", "  "], "int": ["2.5", "x"], "float": ["x", ""]}
# a word's meaning is its module's to parse (spec/supervision.py, spec/inputs.py, spec/stallopts.py), for the flag and
# runward.toml alike; a choice is argparse's to check (choices=): neither has a conversion that refuses
CHECKED_ELSEWHERE = ("flag", "word", "choice")


def test_every_cli_conversion_refuses_what_the_toml_check_refuses():
    import argparse
    for opt in options.OPTS.values():
        if opt.kind in CHECKED_ELSEWHERE:
            continue  # a switch: argparse takes no value to convert; a word, a choice: above
        conv = options._converter(opt)
        for bad in CLI_BAD[opt.kind]:
            with pytest.raises((argparse.ArgumentTypeError, ValueError)):  # exit 2, naming the flag
                conv(bad)


def _library_verbs():
    for name in dir(library):
        f = getattr(library, name)
        if inspect.isfunction(f) and f.__module__ == library.__name__ and not name.startswith("_"):
            yield name, inspect.signature(f)


# A library keyword that is not a declared option, each with why. A new keyword must be
# declared (spec/options.py) or land here with its reason: the test below fails on it otherwise.
NOT_AN_OPTION = {  # the verb's arguments, not its options (positionals on the CLI)
    "name", "command", "command_line", "pattern", "files", "a", "b", "output", "on", "config", "metric", "x",
    "attempts",  # plot: the CLI's and the API's only (no MCP tool: it writes a file here), checked by the operation
}
OWN_SHAPE = {  # the same option, shaped for each side: no one declaration can say it
    ("start", "env"): "a mapping on the API and MCP; K=V or a bare NAME words on the CLI",
    ("restart", "env"): "a mapping (a value of None unsets) on the API and MCP; K=V / K= words on the CLI",
    ("exec", "env"): "a mapping on the API; K=V or a bare NAME words on the CLI",
    ("start", "gpus"): "a list of indices on the API and MCP; 0,1 on the CLI",
    ("restart", "deploy"): "True/False/None on the API and MCP; --deploy / --no-deploy / neither on the CLI "
                           "(both declared: deploy, no_deploy)",
    ("watch", "min"): "a mapping METRIC: V on the API and MCP; repeated METRIC=V words on the CLI",
    ("watch", "max"): "a mapping METRIC: V on the API and MCP; repeated METRIC=V words on the CLI",
    ("watch", "stall"): "seconds on the API and MCP; --stall-after DURATION (5m) on the CLI (spec/stallopts.py)",
    ("kill", "confirm"): "the API's and MCP's name for --yes (declared: yes; a dry run unless given)",
    ("lint", "interactive"): "lint_command's, declared (interactive): listed for the name lint_command",
}


def test_every_library_keyword_is_a_declared_option_or_said_why_not():
    """issue 27: each option declared once. Every keyword of every verb of `import runward`
    is a declaration of spec/options.py (whose flag, type and MCP schema the tests here hold to
    it), or one of the verb's arguments, or shaped per side, with the reason."""
    missing = []
    for fn, sig in _library_verbs():
        verb = {"lint_command": "lint", "named_targets": "targets"}.get(fn, fn)
        for p in sig.parameters.values():
            if p.name in NOT_AN_OPTION or (verb, p.name) in OWN_SHAPE or p.name in options.OPTS:
                continue
            missing.append(f"{fn}({p.name})")
    assert not missing, "library keywords declared nowhere: " + ", ".join(missing)


def test_every_library_keyword_of_a_declared_option_has_its_type():
    found = 0
    for verb, sig in _library_verbs():
        for p in sig.parameters.values():
            opt = options.OPTS.get(p.name)
            if opt is None or (verb, p.name) in ANOTHER_MEANING or (verb, p.name) in OWN_SHAPE:
                continue
            found += 1
            want = TYPES[opt.kind].__name__
            assert str(p.annotation).replace(" ", "") in (f"{want}|None", want), (verb, p.name, p.annotation)
            if opt.kind == "flag":
                assert p.default is False, (verb, p.name, "a switch is off unless given, as on the CLI")
            elif not (verb, p.name) == ("watch", "for_s"):  # the window: 60, as the CLI's --for
                assert p.default in (None, inspect.Parameter.empty), (  # prune's older_than: required, as --older-than
                    verb, p.name, "a declared option's default is the run's or the target's")
    assert found >= 20


def test_every_mcp_parameter_of_a_declared_option_is_the_declaration():
    pytest.importorskip("mcp", reason="the MCP extra (runward[mcp]) is not installed")
    from runward.mcp import server as mcpserver
    server = mcpserver.build(None, mcpserver.Policy(frozenset(), None, False, "test"))
    found = 0
    for tool in asyncio.run(server.list_tools()):
        for pname, sch in tool.input_schema["properties"].items():
            opt = options.OPTS.get(pname)
            if opt is None or (tool.name, pname) in ANOTHER_MEANING or (tool.name, pname) in MCP_OWN or (
                    tool.name, pname) in OWN_SHAPE:
                continue
            found += 1
            assert sch["description"] == options.help(pname, tool.name), (tool.name, pname, sch)
            kinds = [s for s in sch.get("anyOf", [sch]) if s.get("type") != "null"]
            assert [k["type"] for k in kinds] == [SCHEMA[opt.kind]], (tool.name, pname, sch)
            if opt.kind == "seconds":
                assert kinds[0].get("minimum") == 0, (tool.name, pname, sch)
            if opt.kind == "count":
                assert kinds[0].get("minimum") == opt.least, (tool.name, pname, sch)
    assert found >= 14


# An MCP parameter of a declared option that the tool bounds more tightly, with why.
MCP_OWN = {
    ("watch", "for_s"): "at most 600 s, 30 by default: a tool call must end before a client drops it",
}


@pytest.mark.parametrize("name", sorted(n for n, o in options.OPTS.items() if o.toml is True))
def test_runward_toml_takes_each_declared_key_and_refuses_a_wrong_value(tmp_path, name):
    opt = options.OPTS[name]
    assert name in config.RUN_KEYS
    p = tmp_path / "runward.toml"

    def write(value):
        import json
        v = json.dumps(value) if not (isinstance(value, float) and value in (float("inf"),)) else "inf"
        v = {True: "true", False: "false"}.get(value, v) if isinstance(value, bool) else v
        also = 'log_max = "2G"\n' if name == "log_keep" else ""  # log_keep alone: refused (spec/config.py)
        p.write_text(f'[runs.r]\ncommand = ["true"]\n{also}{name} = {v}\n')
    write(GOOD[opt.kind])
    assert config.load(p).runs["r"][name] == GOOD[opt.kind]
    for bad in BAD[opt.kind]:
        write(bad)
        cfg = config.load(p)  # loaded: the other runs, and where r lives, stay usable
        assert "r" in cfg.runs and cfg.runs.placement("r") == {}
        with pytest.raises(BadInput) as e:
            cfg.runs["r"]  # a verb that reads r's table: refused
        with pytest.raises(BadInput):
            cfg.runs.value("r", name)
        assert cfg.runs.value("r", "command") == ["true"]
        assert f"[runs.r] {name} = " in e.value.message and str(p) in e.value.message, e.value.message
        assert e.value.hint and (name in e.value.hint or opt.kind == "signal"), e.value.hint


def test_a_bad_toml_value_is_exit_2_before_anything_runs(cli_run):
    """End to end: the traceback of before (grace = "abc": exit 3, 'at hop: local') is gone."""
    c = cli_run
    (c.cwd / "runward.toml").write_text('[runs.r]\ncommand = ["sleep", "30"]\ngrace = "abc"\n')
    p = c.run("start", "r")
    assert p.returncode == 2 and "[runs.r] grace = 'abc': not a number of seconds" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (c.home / "runs" / "r").exists()


def test_a_bad_toml_value_refuses_what_would_use_it_and_nothing_else(cli_run):
    """A typo in one run's settle, made while it runs (CI, stop 35: `status` refused it, exit 2):
    status, logs and stop of that run still work, as does every verb on another run; start and
    restart of it refuse, naming the key, and the running job is untouched."""
    c = cli_run
    good = '[runs.r]\ncommand = ["sleep", "30"]\nsettle = 0.2\n[runs.o]\ncommand = ["sleep", "30"]\nsettle = 0.2\n'
    (c.cwd / "runward.toml").write_text(good)
    for name in ("r", "o"):
        rc, doc = c.json("start", name)
        assert rc == 0, doc
    pid = c.status("r")["pid"]
    (c.cwd / "runward.toml").write_text(good.replace("settle = 0.2", "settle = -1", 1))
    assert c.status("r")["pid"] == pid and c.status("o")["state"] == "running"
    assert c.run("logs", "r").returncode == 0
    for verb in ("restart", "start"):
        rc, doc = c.json(verb, "r")
        assert rc == 2 and "[runs.r] settle = -1" in doc["error"]["message"], doc
    assert os.path.exists(f"/proc/{pid}") and c.status("r")["pid"] == pid, "a refused restart touched the job"
    rc, doc = c.json("restart", "o")
    assert rc == 0, doc
    rc, doc = c.json("stop", "--all")
    assert rc == 0, doc
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


@pytest.fixture
def cli_run(cli):
    return cli


def _verb_of(fn: str) -> str:
    return {"lint_command": "lint", "named_targets": "targets"}.get(fn, fn)


# A declared keyword of the API that its verb's CLI takes under no flag, with why.
NO_FLAG = {}
# The API's None that library.py leaves out of the options, so the options' own default (the
# flag's) applies: the same default, said as None in a signature.
NONE_IS_THE_FLAGS_DEFAULT = {("kill", "signal"), ("stacks", "timeout")}


def test_every_declared_library_keyword_is_its_verbs_flag_with_the_same_default():
    """Per verb, not just somewhere: the API's keyword is the CLI flag of that verb (its dest),
    and what the API does without it is what the CLI does without the flag (the same default)."""
    parsers = {verb: parser for verb, _, parser in cli.verb_parsers()}
    found, drift = 0, []
    for fn, sig in _library_verbs():
        verb = _verb_of(fn)
        for p in sig.parameters.values():
            opt = options.OPTS.get(p.name)
            if opt is None or (verb, p.name) in ANOTHER_MEANING or (verb, p.name) in OWN_SHAPE:
                continue
            if (verb, p.name) in NO_FLAG:
                continue
            dest = opt.dest or opt.name
            acts = [a for a in parsers[verb]._actions if a.dest == dest and a.option_strings]
            assert acts, (fn, p.name, f"runward {verb} has no {opt.flag}: add it, or say why in NO_FLAG")
            want = p.default if p.default is not inspect.Parameter.empty else None
            if want is None and (verb, p.name) in NONE_IS_THE_FLAGS_DEFAULT:
                want = acts[0].default
            if acts[0].default != want:
                drift.append((fn, p.name, "API default", want, "CLI default", acts[0].default))
            found += 1
    assert not drift, drift
    assert found >= 30


# An MCP tool's parameter that is neither a declared option nor a library keyword shaped per
# side: none today. A new one lands in spec/options.py, or here with why.
def test_every_mcp_parameter_is_a_declared_option_or_said_why_not_and_its_librarys():
    pytest.importorskip("mcp", reason="the MCP extra (runward[mcp]) is not installed")
    from runward.mcp import server as mcpserver
    server = mcpserver.build(None, mcpserver.Policy(frozenset(), None, False, "test"))
    sigs = {_verb_of(fn): sig for fn, sig in _library_verbs()}
    missing, checked = [], 0
    for tool in asyncio.run(server.list_tools()):
        lib = sigs[tool.name].parameters
        for pname, sch in tool.input_schema["properties"].items():
            key = (tool.name, pname)
            # the tool passes it on to the API's keyword of the same name: the sides cannot differ in name
            assert pname in lib, (tool.name, pname, "an MCP parameter the Python API does not take")
            if pname in NOT_AN_OPTION or key in OWN_SHAPE or key in ANOTHER_MEANING:
                continue
            if pname not in options.OPTS:
                missing.append(f"{tool.name}({pname})")
                continue
            if key in MCP_OWN:
                continue
            checked += 1
            default = lib[pname].default
            assert sch.get("default", None) == (None if default is inspect.Parameter.empty else default), (
                tool.name, pname, sch, "the MCP default is not the API's")
    assert not missing, "MCP parameters declared nowhere: " + ", ".join(missing)
    assert checked >= 14


def _bad_api_calls(runward=None):
    return {  # each a value of the wrong type or shape: a BadInput (exit 2), never a Python exception
        "exec_timeout": lambda: runward.exec(["true"], timeout="abc"),
        "stacks_timeout": lambda: runward.stacks("o7-bad-stacks", timeout="abc"),
        "start_gpus_text": lambda: runward.start("o7-bad-gpus", ["true"], gpus=["a"]),
        "start_gpus_int": lambda: runward.start("o7-bad-gpus2", ["true"], gpus=3),
        "restart_deploy": lambda: runward.restart("o7-bad-deploy", deploy="yes"),
        "kill_confirm": lambda: runward.kill("o7-nothing-matches-this", confirm="yes"),
        # shaped keywords (spec/apivalues.py): a string was read as its characters, else Python's error escaped
        "start_command_text": lambda: runward.start("o7-bad-argv", "true"),
        "start_env_text": lambda: runward.start("o7-bad-env", ["true"], env="LR=1"),
        "restart_env_list": lambda: runward.restart("o7-bad-env2", env=["LR=1"]),
        "exec_command_text": lambda: runward.exec("true"),
        "exec_env_int": lambda: runward.exec(["true"], env=3),
        "push_files_int": lambda: runward.push(3),
        "pull_files_int": lambda: runward.pull(3),
        "plot_metric_text": lambda: runward.plot("o7-bad-plot", "o7.png", metric="loss"),
        "plot_attempts_int": lambda: runward.plot("o7-bad-plot", "o7.png", attempts=3),
    }


NAMED = {"exec_timeout": "timeout", "stacks_timeout": "timeout", "start_gpus_text": "gpus", "start_gpus_int": "gpus",
         "restart_deploy": "deploy", "kill_confirm": "yes", "start_command_text": "command=",
         "start_env_text": "env", "restart_env_list": "env", "exec_command_text": "command=",
         "exec_env_int": "env", "push_files_int": "files=", "pull_files_int": "files=",
         "plot_metric_text": "metric=", "plot_attempts_int": "attempts="}


@pytest.mark.parametrize("case", sorted(_bad_api_calls()))  # the keys; the calls made with the test's runward
def test_a_bad_api_value_is_bad_input_exit_2_and_nothing_runs(case, lib):
    """Issue 27: runward.start(gpus=["a"]) raised int()'s ValueError; gpus=3 a TypeError;
    restart(deploy="yes") restarted as if deploy were unset; kill(confirm="yes") answered a dry run;
    start("r", "true") ran the argv ["t", "r", "u", "e"]; env="x", files=3: AttributeError, TypeError."""
    res = _bad_api_calls(lib)[case]()  # on the test's own home, from its work directory
    assert res.exit_code == 2 and res.error["type"] == "BadInput", res.document
    assert res.error.get("hint") and NAMED[case] in res.error["message"], res.document
    runs = os.path.join(os.environ["RUNWARD_HOME"], "runs")
    assert not os.path.isdir(runs) or not os.listdir(runs), ("a refused call left a run", os.listdir(runs))


# The flags of start and restart that are the verbs' own selectors, not a run's options: where and
# which (cli._add_common's --on, --config, --json; --all: every run of runward.toml).
SELECTORS = {"--on", "--config", "--json", "--all", "--help"}


@pytest.mark.parametrize("verb", ["start", "restart"])
def test_every_flag_of_start_and_restart_is_declared(verb):
    """issue 40: one declaration per run option. Each flag start and restart show is a
    declaration of spec/options.py (its meaning there, or another said in ANOTHER_MEANING), so
    runward.toml's keys, the MCP tools and the library read the same table."""
    import argparse
    parser = {v: p for v, _, p in cli.verb_parsers()}[verb]
    by_flag = _declared_by_flag()
    loose = [a.option_strings[-1] for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS
             and not set(a.option_strings) & (SELECTORS | set(by_flag))]
    assert not loose, f"runward {verb}'s flags declared nowhere (spec/options.py): {loose}"


@pytest.mark.parametrize("name", sorted(n for n, o in options.OPTS.items() if o.toml))
def test_every_declared_toml_key_is_a_key_of_a_run(name):
    assert name in config.RUN_KEYS
