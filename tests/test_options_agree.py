"""Each declared option (src/runward/options.py, issue 27) agrees on every side: the CLI's
flag (argparse, every verb), the Python API's keyword (library.py's signatures), the MCP
tool's parameter (its JSON Schema, from the server the CLI's `runward mcp` builds) and
runward.toml's [runs.NAME] key (a verb reading that run's table refuses a wrong value with
exit 2, naming the file, the table and the key; it reached the agent as a traceback, exit 3, before)."""

from __future__ import annotations

import asyncio
import inspect
import os

import pytest

from runward import cli, config, library, options
from runward.errors import BadInput

# the same flag name with another meaning: said here, with why, so no other can slip by
ANOTHER_MEANING = {
    ("kill", "grace"): "a stray process's grace (default 10), not a run's",
    ("exec", "cwd"): "the one-off command's directory, with no run and no last attempt",
}

TYPES = {"seconds": float, "count": int, "regex": str, "signal": str, "text": str}
SCHEMA = {"seconds": "number", "count": "integer", "regex": "string", "signal": "string", "text": "string"}
BAD = {"seconds": ["soon", -1, float("inf"), True], "count": [2.5, "3", -1], "regex": ["(", 3, ""],
       "signal": ["SIGFOO", 0, ""], "text": ["", 7]}
GOOD = {"seconds": 2.5, "count": 3, "regex": "^step 1 ", "signal": "INT", "text": "/root/work"}


def _flags():
    for verb, _, parser in cli.verb_parsers():
        for a in parser._actions:
            for s in a.option_strings:
                if s.startswith("--") and s[2:].replace("-", "_") in options.OPTS:
                    yield verb, options.OPTS[s[2:].replace("-", "_")], a


def test_every_verb_flag_of_a_declared_option_is_the_declaration():
    seen = set()
    for verb, opt, a in _flags():
        if (verb, opt.name) in ANOTHER_MEANING:
            assert a.help != opt.help, (verb, opt.name, "declared after all: drop it from ANOTHER_MEANING")
            continue
        seen.add(opt.name)
        assert a.dest == opt.name and a.help == opt.help and a.metavar == opt.metavar, (verb, opt.name, a)
        assert a.type is not None and a.type.__name__ == opt.kind, (verb, opt.name, a.type)
        good = {"seconds": "2.5", "count": "3", "regex": "^s", "signal": "INT", "text": "x"}[opt.kind]
        assert a.type(good) == {"seconds": 2.5, "count": 3}.get(opt.kind, good), (verb, opt.name)
    assert seen == set(options.OPTS), f"declared, but no verb takes them: {set(options.OPTS) - seen}"


CLI_BAD = {"seconds": ["soon", "-1", "inf", "nan"], "count": ["2.5", "-1", "x"], "regex": ["(", ""],
           "signal": ["SIGFOO", "0", ""], "text": ["", "  "]}


def test_every_cli_conversion_refuses_what_the_toml_check_refuses():
    import argparse
    for opt in options.OPTS.values():
        conv = options._converter(opt)
        for bad in CLI_BAD[opt.kind]:
            with pytest.raises(argparse.ArgumentTypeError):  # exit 2, naming the flag
                conv(bad)


def _library_verbs():
    for name in dir(library):
        f = getattr(library, name)
        if inspect.isfunction(f) and f.__module__ == library.__name__ and not name.startswith("_"):
            yield name, inspect.signature(f)


def test_every_library_keyword_of_a_declared_option_has_its_type():
    found = 0
    for verb, sig in _library_verbs():
        for p in sig.parameters.values():
            opt = options.OPTS.get(p.name)
            if opt is None or (verb, p.name) in ANOTHER_MEANING:
                continue
            found += 1
            want = TYPES[opt.kind].__name__
            assert str(p.annotation).replace(" ", "") in (f"{want}|None", want), (verb, p.name, p.annotation)
            assert p.default is None, (verb, p.name, "a declared option's default is the run's or the target's")
    assert found >= 6


def test_every_mcp_parameter_of_a_declared_option_is_the_declaration():
    pytest.importorskip("mcp", reason="the MCP extra (runward[mcp]) is not installed")
    from runward import mcpserver
    server = mcpserver.build(None, mcpserver.Policy(frozenset(), None, False, "test"))
    found = 0
    for tool in asyncio.run(server.list_tools()):
        for pname, sch in tool.input_schema["properties"].items():
            opt = options.OPTS.get(pname)
            if opt is None or (tool.name, pname) in ANOTHER_MEANING:
                continue
            found += 1
            assert sch["description"] == opt.help, (tool.name, pname, sch)
            kinds = [s for s in sch.get("anyOf", [sch]) if s.get("type") != "null"]
            assert [k["type"] for k in kinds] == [SCHEMA[opt.kind]], (tool.name, pname, sch)
            if opt.kind == "seconds":
                assert kinds[0].get("minimum") == 0, (tool.name, pname, sch)
    assert found >= 5


@pytest.mark.parametrize("name", sorted(n for n, o in options.OPTS.items() if o.toml))
def test_runward_toml_takes_each_declared_key_and_refuses_a_wrong_value(tmp_path, name):
    opt = options.OPTS[name]
    assert name in config.RUN_KEYS
    p = tmp_path / "runward.toml"

    def write(value):
        import json
        v = json.dumps(value) if not (isinstance(value, float) and value in (float("inf"),)) else "inf"
        v = {True: "true", False: "false"}.get(value, v) if isinstance(value, bool) else v
        also = 'log_max = "2G"\n' if name == "log_keep" else ""  # log_keep alone: refused (config.py)
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
