"""runward.toml: the parsed form is cached by the file's exact bytes, never by its timestamps."""

from __future__ import annotations

import os

import pytest

from runward import config
from runward.errors import BadInput


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _write(p, text, times=None):
    p.write_text(text)
    if times:
        os.utime(p, ns=times)


def test_an_edit_of_the_same_size_and_timestamps_is_read(home, tmp_path):
    p = tmp_path / "runward.toml"
    _write(p, '[targets.a]\non = "ssh://hostA"\n')
    st = p.stat()
    assert config.load(p).targets["a"]["on"] == "ssh://hostA"
    assert list((home / "cache").glob("config-*")), "the parsed form was not cached"
    _write(p, '[targets.a]\non = "ssh://hostB"\n', times=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    assert config.load(p).targets["a"]["on"] == "ssh://hostB"


def test_a_cached_parse_is_the_parse(home, tmp_path):
    p = tmp_path / "runward.toml"
    _write(p, '[runs.train]\non = "local"\ncommand = ["python3", "t.py"]\nsettle = 2.5\n'
              '[runs.train.env]\nLR = "3e-4"\n')
    first = config.load(p)
    second = config.load(p)  # from the cache
    assert first.runs == second.runs and second.runs["train"]["settle"] == 2.5


def test_a_toml_date_is_parsed_each_time_and_still_validated(home, tmp_path):
    p = tmp_path / "runward.toml"
    _write(p, "[runs.x]\non = \"local\"\ncommand = [\"true\"]\nwhen = 2026-12-02\n")
    for _ in range(2):  # marshal cannot keep a date: no cache, and no crash
        with pytest.raises(BadInput) as e:
            config.load(p)
        assert "when" in str(e.value)


def test_a_cache_file_open_to_others_or_torn_is_ignored(home, tmp_path):
    p = tmp_path / "runward.toml"
    _write(p, '[targets.a]\non = "ssh://hostA"\n')
    config.load(p)
    (cache,) = (home / "cache").glob("config-*")
    import marshal
    cache.write_bytes(marshal.dumps((p.read_bytes(), {"targets": {"a": {"on": "ssh://evil"}}})))
    cache.chmod(0o666)
    assert config.load(p).targets["a"]["on"] == "ssh://hostA"
    cache.chmod(0o600)
    cache.write_bytes(b"\x00garbage")
    assert config.load(p).targets["a"]["on"] == "ssh://hostA"


def test_invalid_toml_is_bad_input_naming_the_file(home, tmp_path):
    p = tmp_path / "runward.toml"
    _write(p, "[targets.a\n")
    with pytest.raises(BadInput) as e:
        config.load(p)
    assert str(p) in str(e.value) and "invalid TOML" in str(e.value)
