"""runward.toml: parsed afresh on every load, and never copied into the cache (it may hold
secrets)."""

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
    _write(p, '[targets.a]\non = "ssh://hostB"\n', times=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    assert config.load(p).targets["a"]["on"] == "ssh://hostB"


def test_the_config_is_never_copied_into_the_cache(home, tmp_path):
    """runward.toml may carry secrets in env tables: loading it writes nothing of ours."""
    p = tmp_path / "runward.toml"
    _write(p, '[runs.train]\non = "local"\ncommand = ["python3", "t.py"]\nsettle = 2.5\n'
              '[runs.train.env]\nHF_TOKEN = "hf_secret"\n')
    first = config.load(p)
    second = config.load(p)
    assert first.runs == second.runs and second.runs["train"]["settle"] == 2.5
    assert not home.exists() or not any("hf_secret" in f.read_text(errors="replace")
                                        for f in home.rglob("*") if f.is_file())
    assert not list(home.glob("cache/config-*"))


def test_a_toml_date_is_parsed_each_time_and_still_validated(home, tmp_path):
    p = tmp_path / "runward.toml"
    _write(p, "[runs.x]\non = \"local\"\ncommand = [\"true\"]\nwhen = 2026-12-02\n")
    for _ in range(2):  # the date parses (tomllib), then the unknown key is refused, each time
        with pytest.raises(BadInput) as e:
            config.load(p)
        assert "when" in str(e.value)


def test_invalid_toml_is_bad_input_naming_the_file(home, tmp_path):
    p = tmp_path / "runward.toml"
    _write(p, "[targets.a\n")
    with pytest.raises(BadInput) as e:
        config.load(p)
    assert str(p) in str(e.value) and "invalid TOML" in str(e.value)


@pytest.mark.parametrize("body,named", [
    ('[ssh]\nconfg = "x"\n', "confg"),                 # a typo was silently ignored
    ('[ssh]\nalive_timeout = 1\n', "alive_timeout"),
    ('[ssh]\nalive_timeout = "15s"\n', "alive_timeout"),
])
def test_the_ssh_section_is_validated(home, tmp_path, body, named):
    (tmp_path / "runward.toml").write_text(body)
    with pytest.raises(BadInput) as e:
        config.load(str(tmp_path / "runward.toml"))
    assert named in e.value.message and e.value.hint


def test_ssh_alive_timeout_is_read(home, tmp_path):
    (tmp_path / "runward.toml").write_text('[ssh]\nalive_timeout = 6\n')
    assert config.load(str(tmp_path / "runward.toml")).ssh_alive_timeout == 6.0
