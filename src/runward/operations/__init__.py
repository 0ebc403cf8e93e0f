"""The operations layer (docs/architecture.md, "The operations layer"): one typed
function per verb, with a typed options object, answering an Outcome, for the CLI
(verbs/<verb>.py parses, calls, renders), the Python API (library.py) and the MCP tools
alike. No argv is parsed here and nothing is printed: the Outcome holds the document the
CLI's `--json` prints and, made only when asked, the human text.

Every verb with a document is here; what stays in verbs/ is purely the terminal's: printing
a follow's lines as they come, prompts, the live view (top), completion, the demo and the
MCP server's entry."""

from __future__ import annotations

from ..errors import EXIT_OK


class Options:
    """A verb's typed options: each field an annotated class attribute with its default
    (a plain class, not a dataclass: `status --json` would pay for dataclasses' imports, ~7 ms).
    Options(name="train", grace=5.0); an unknown keyword is a TypeError, as a call's is."""

    def __init__(self, **given):
        names = self.fields()
        for k in given:
            if k not in names:
                raise TypeError(f"{type(self).__name__} has no option {k!r}")
        for k in names:
            v = given[k] if k in given else getattr(type(self), k)
            setattr(self, k, list(v) if isinstance(v, list) else v)  # a list default is not shared

    @classmethod
    def fields(cls) -> list[str]:
        out: list[str] = []
        for c in reversed(cls.__mro__):
            out += [n for n in getattr(c, "__annotations__", {}) if n not in out]
        return out

    @classmethod
    def from_args(cls, args, **parsed):
        """From argparse's namespace: the fields it has (a dest left None keeps the default);
        PARSED: the fields the verb made of the flags' words (env, gpus, deploy), over them."""
        given = {n: getattr(args, n) for n in cls.fields() if getattr(args, n, None) is not None}
        return cls(**{**given, **parsed})

    def __repr__(self) -> str:
        return "%s(%s)" % (type(self).__name__, ", ".join(f"{n}={getattr(self, n)!r}" for n in self.fields()))


def takes(verb: str):
    """A class decorator: a field for each declared option VERB takes (options.TAKES) that the
    class does not type itself (env and gpus are typed as the verb parses their words), a
    switch off by default, any other None (not given: the run's, or runward.toml's)."""
    def declare(cls):
        from ..spec import options
        own = cls.__dict__.get("__annotations__", {})
        for name in options.TAKES[verb]:
            if name not in own:
                flag = options.OPTS[name].kind == "flag"
                own[name] = "bool" if flag else "object | None"
                setattr(cls, name, False if flag else None)
        cls.__annotations__ = own
        return cls
    return declare


class Targeted(Options):
    """The common flags of a verb that acts on a target (cli._add_common): --on, repeated for
    a multi-node run's nodes (on is the first), and --config."""
    on: str | None = None
    nodes: list = []
    config: str | None = None


class Checkpointed(Options):
    """stop's and restart's checkpoint flags (docs/checkpoint.md): the checkpoint signal and
    the wait for its file before the stop."""
    checkpoint: bool = False
    no_checkpoint: bool = False
    checkpoint_signal: str | None = None
    checkpoint_wait_for: str | None = None
    checkpoint_timeout: float | None = None


class Outcome:
    """One verb's answer: its exit code, the `--json` document, and its human text (made only
    when shown; None: nothing on stdout); STDERR: what a person is told on stderr instead (an
    interrupted verb), said as `runward VERB: ...`; NOTES: lines for stderr as they are, shown
    before the text (a node that failed among others, an alert, a truncated read)."""

    def __init__(self, command: str, code: int, document: dict, text=None, stderr: str | None = None,
                 notes: str | None = None):
        self.command, self.code, self.document, self.text, self.stderr = command, code, document, text, stderr
        self.notes = notes

    def render(self) -> str:
        return self.text() if self.text is not None else ""


def single(command: str, target, result: dict, text, code: int = EXIT_OK, notes: str | None = None) -> Outcome:
    """A verb's answer on one target."""
    return Outcome(command, code, {"ok": code == EXIT_OK, "command": command, "target": str(target), "result": result},
                   text, notes=notes)


def failed(command: str, e) -> Outcome:
    """A RunwardError as the CLI's --json says it (cli._fail)."""
    return Outcome(command, e.exit_code, {"ok": False, "command": command, "error": e.to_dict(), "result": e.result})


def check(opts) -> None:
    """A typed options object's declared options (spec/options.py), checked as argparse checks the
    flags: the Python API and the MCP tools call operations directly, without argv."""
    from ..spec import options
    from ..errors import BadInput
    by_dest = {o.dest: o for o in options.OPTS.values() if o.dest}
    fields = opts.fields()
    # a target and a run name are strings (the CLI's always are): unchecked, on=["local"] is a
    # TypeError out of the API, on=5 "empty target", deploy(name=None) a TypeError
    for name, what in (("on", "a target string or runward.Target"), ("name", "a run name (a string)")):
        value = getattr(opts, name, None) if name in fields else None
        if value is not None and not isinstance(value, str):
            raise BadInput(f"invalid {name} {value!r}: not {what}",
                           'e.g. on="local" or on="ssh://gpu1"' if name == "on" else 'e.g. name="train"')
    for name in fields:
        opt = options.OPTS.get(name) or by_dest.get(name)
        value = getattr(opts, name)
        if opt is not None and value is not None:
            options.refuse(opt, value)
