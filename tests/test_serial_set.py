"""The serial set (tests/conftest.py SERIAL and RAY) holds every test file that reaches state
the suite has one of: a file that takes the one Slurm's or the one Ray cluster's fixtures, or
that adds iptables rules in a testbed host's network namespace, runs alone in scripts/test's
serial steps (docs/testing.md, "Running the suite in parallel"). Read from the files' text: a
new file that uses one of these and is not marked fails here, naming what it uses."""

from __future__ import annotations

import re
from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parent

# what a file's text shows -> what it shares; the first two are the clusters' own fixtures
# (helpers_slurm's sb, helpers_ray's tb and NetnsCLI), the last changes a testbed host's network
SHARED = {
    r"^\s*from helpers_slurm import|^\s*import helpers_slurm": "the one Slurm (helpers_slurm)",
    r"^\s*from helpers_ray import|^\s*import helpers_ray": "the one Ray cluster (helpers_ray)",
    r"\biptables\b": "iptables rules in a testbed host's network namespace",
}


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if p.name != Path(__file__).name)


def test_every_file_that_reaches_a_shared_cluster_or_cuts_a_host_is_serial():
    missing = []
    for path in _test_files():
        text = path.read_text()
        for pattern, what in SHARED.items():
            if re.search(pattern, text, re.M) and path.name not in conftest.SERIAL:
                missing.append(f"{path.relative_to(TESTS)}: {what}")
    assert not missing, "not in tests/conftest.py SERIAL:\n" + "\n".join(missing)


def test_every_file_on_the_ray_cluster_runs_under_its_lock():
    missing = [p.name for p in _test_files()
               if re.search(r"^\s*(from|import) helpers_ray\b", p.read_text(), re.M) and p.name not in conftest.RAY]
    assert not missing, f"not in tests/conftest.py RAY (scripts/test's Ray step): {missing}"


def test_the_serial_set_names_files_that_exist_each_with_its_reason():
    names = {p.name for p in TESTS.rglob("test_*.py")}
    for entry in conftest.SERIAL:
        base, _, test = entry.partition("::")
        assert base in names, entry
        if test:
            text = next(TESTS.rglob(base)).read_text()
            assert re.search(rf"^def {re.escape(test)}\(", text, re.M), f"{entry}: no such test"
    assert all(reason.strip() for reason in conftest.SERIAL.values())
    for entry in conftest.RAY:
        assert entry.split("::")[0] in conftest.SERIAL, f"{entry}: a Ray test is serial too"


def test_a_file_that_takes_the_slurm_fixture_is_caught(tmp_path, monkeypatch):
    """The check is not vacuous: a file like test_rm_prune, left out of SERIAL, is named."""
    monkeypatch.delitem(conftest.SERIAL, "test_rm_prune.py")
    try:
        test_every_file_that_reaches_a_shared_cluster_or_cuts_a_host_is_serial()
    except AssertionError as e:
        assert "test_rm_prune.py: the one Slurm" in str(e), e
    else:
        raise AssertionError("test_rm_prune.py left out of SERIAL was not named")
