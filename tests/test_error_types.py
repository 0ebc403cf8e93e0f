"""One closed list of error types (issue 27): errors.ERROR_TYPES holds every "type" a --json
error document can carry, with its exit codes; the code says no other, and docs/api.md,
docs/agents.md (their tables) and docs/protocol.md (the agent's types) say exactly these.

Read from the sources with ast and regular expressions, not by running verbs: a type that
only a rare failure says must be on the list as surely as a common one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from runward import errors

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "src" / "runward"
AGENT = PKG / "agent"
_TYPE_IN_TEXT = re.compile(r'"type":\s*"([A-Z]\w+)"')


def _sources(under: Path, *, skip: Path | None = None):
    for path in sorted(under.rglob("*.py")):
        if skip is None or skip not in path.parents:
            yield path, path.read_text()


def _agent_types() -> dict[str, str]:
    """type -> where, for every AgentFailure("T", ...) and {"type": "T"} the agent writes."""
    found = {}
    for path, text in _sources(AGENT):
        for node in ast.walk(ast.parse(text, str(path))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "AgentFailure" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                found[node.args[0].value] = f"{path.relative_to(ROOT)}:{node.lineno}"
        for m in _TYPE_IN_TEXT.finditer(text):  # reply dicts, and the bootstrap's own (a string)
            found.setdefault(m.group(1), str(path.relative_to(ROOT)))
    return found


def _cli_types() -> dict[str, str]:
    """type -> where, for every error class's kind and every {"type": "T"} a CLI module writes."""
    found = {}
    for path, text in _sources(PKG, skip=AGENT):
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["kind"]
                            and isinstance(stmt.value, ast.Constant)):
                        found[stmt.value.value] = f"{path.relative_to(ROOT)}:{node.lineno} class {node.name}"
        for m in _TYPE_IN_TEXT.finditer(text):
            found.setdefault(m.group(1), str(path.relative_to(ROOT)))
    return found


def _doc_table(doc: str) -> dict[str, set[int]]:
    """The rows of the doc's `Error types` table: type -> its exit codes."""
    text = (ROOT / "docs" / doc).read_text()
    section = re.search(r"^#+ Error types\n(.*?)(?=^#|\Z)", text, re.S | re.M)
    assert section, f"docs/{doc} has no 'Error types' section"
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section.group(1), re.M)
    return {t: {int(c) for c in re.findall(r"\d+", codes)} for t, codes in rows}


def _doc_mentions(doc: str) -> set[str]:
    """Every type the doc names outside its table: `"type": "T"` in examples, and the
    backticked names in a sentence about `error.type`."""
    text = (ROOT / "docs" / doc).read_text()
    names = set(_TYPE_IN_TEXT.findall(text))
    for sentence in re.findall(r"error\.type[^.]*", text):
        names |= set(re.findall(r"`([A-Z]\w+)`", sentence))
    return names


CLOSED = {t: set(codes) for t, codes in errors.ERROR_TYPES.items()}


def test_every_type_the_agent_says_maps_to_a_cli_class():
    unmapped = {t: where for t, where in _agent_types().items()
                if t not in errors.AGENT_TYPES and t not in errors.AGENT_INTERNAL_TYPES}
    assert not unmapped, f"agent error types with no class in errors.AGENT_TYPES: {unmapped}"


def test_every_type_the_cli_says_is_on_the_closed_list():
    stray = {t: where for t, where in _cli_types().items() if t not in CLOSED}
    assert not stray, f"error types missing from errors.ERROR_TYPES: {stray}"
    assert set(errors.AGENT_TYPES) <= set(CLOSED)


def test_an_early_exit_is_exited_early_and_still_an_operation_failure():
    """The docs promised OperationFailed for a job that exits while settling, the JSON says
    ExitedEarly: the class is ExitedEarly, a subclass, so `except OperationFailed` holds."""
    e = errors.from_agent({"type": "ExitedEarly", "message": "train exited during the settle period (exit 3)",
                           "details": {"result": {"exit": {"code": 3}}}})
    assert isinstance(e, errors.ExitedEarly) and isinstance(e, errors.OperationFailed)
    assert e.to_dict()["type"] == "ExitedEarly" and e.exit_code == 1 and e.result == {"exit": {"code": 3}}
    assert errors.ERROR_TYPES["ExitedEarly"] == (errors.EXIT_FAILED,)


def test_api_and_agents_docs_list_exactly_the_closed_list():
    for doc in ("api.md", "agents.md"):
        table = _doc_table(doc)
        missing = sorted(set(CLOSED) - set(table))
        unknown = sorted(set(table) - set(CLOSED))
        wrong = {t: (sorted(table[t]), sorted(CLOSED[t])) for t in set(table) & set(CLOSED) if table[t] != CLOSED[t]}
        assert not missing and not unknown and not wrong, (
            f"docs/{doc}'s error types: missing {missing}, not in the code {unknown}, "
            f"exit codes (doc, code) {wrong}")
        named = sorted(_doc_mentions(doc) - set(CLOSED))
        assert not named, f"docs/{doc} names error types the code does not have: {named}"


def test_protocol_doc_maps_every_agent_type_to_its_exit_code():
    text = (ROOT / "docs" / "protocol.md").read_text()
    para = re.search(r"Error types map\s+to exit codes(.*?)\(the far python", text, re.S)
    assert para, "docs/protocol.md: the paragraph 'Error types map to exit codes' is gone"
    said = {}
    for group, code in re.findall(r"((?:`\w+`/?)+) (\d+)", para.group(1)):
        for t in re.findall(r"`(\w+)`", group):
            said[t] = int(code)
    want = {t: cls.exit_code for t, cls in errors.AGENT_TYPES.items()}
    assert said == want, (f"docs/protocol.md: missing {sorted(set(want) - set(said))}, unknown "
                          f"{sorted(set(said) - set(want))}, codes {[(t, said[t], want[t]) for t in said if t in want and said[t] != want[t]]}")
