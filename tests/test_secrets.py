"""The secret rule (runward.agent.core.secrets): which names are secrets, how a URL's password is
masked, and that what is shown, sent back with reuse_env, means the value the target kept."""

import ast
import inspect

import pytest
from hypothesis import given, settings, strategies as st

from runward.agent.core import secrets
from runward.agent.core.secrets import MASK, REDACTED, is_secret_name, is_shown_form, mask_url_passwords, redact_value

SECRET = ["DB_PASS", "GITHUB_PAT", "NPM_AUTH", "AUTHORIZATION", "SESSION_COOKIE", "AWS_CREDENTIALS", "SSH_PRIVATE",
          "MYSQL_PWD", "HF_TOKEN", "hf_token", "AWS_SECRET_ACCESS_KEY", "db_Password", "OPENAI_APIKEY", "hfToken",
          "SMTP_PASSWD", "GPG_PASSPHRASE", "my.private.key", "X-AUTH-TOKEN", "KEYBOARD"]
NOT_SECRET = ["PATH", "PWD", "OLDPWD", "PATTERN", "LD_LIBRARY_PATH", "PYTHONPATH", "FILE_PATTERN", "LR", "HOME",
              "CUDA_VISIBLE_DEVICES", "TRAIN_STEP_SECONDS", "COMPASS", "SPATIAL", "path", ""]


@pytest.mark.parametrize("name", SECRET)
def test_secret_names(name):
    assert is_secret_name(name) and redact_value(name, "v4lue") == REDACTED


@pytest.mark.parametrize("name", NOT_SECRET)
def test_names_that_are_no_secret(name):
    assert not is_secret_name(name) and redact_value(name, "v4lue") == "v4lue"


def test_the_rule_works_on_words_not_substrings():
    assert is_secret_name("GITHUB_PAT") and not is_secret_name("GITHUBPAT")  # PAT only as a whole word
    assert is_secret_name("X_OLDPWD") and is_secret_name("DB_PWD")  # only the shell's own PWD, OLDPWD are exempt
    assert is_secret_name("AUTH") and is_secret_name("PASS") and not is_secret_name("BYPASS")


@pytest.mark.parametrize("value, shown", [
    ("postgres://alice:hunter2pw@db.internal:5432/x", "postgres://alice:***@db.internal:5432/x"),
    ("redis://:pw@cache:6379/0", "redis://:***@cache:6379/0"),
    ("https://u:p@ss@host/x", "https://u:***@host/x"),  # a raw '@' in the password: hidden whole
    ("--db mysql://root:toor@h --mirror https://a:b@m.example?x=1",
     "--db mysql://root:***@h --mirror https://a:***@m.example?x=1"),
    ("https://user@host/x", "https://user@host/x"),  # no password: nothing to hide
    ("https://registry.example/@scope/pkg", "https://registry.example/@scope/pkg"),  # '@' in the path
    ("http://h:8080/a@b", "http://h:8080/a@b"),
    ("x://u:@h", "x://u:@h"),
    ("plain value", "plain value"),
])
def test_url_passwords_are_masked(value, shown):
    assert mask_url_passwords(value) == shown
    assert redact_value("DATABASE_URL", value) == shown


def test_a_secret_name_hides_a_url_whole():
    assert redact_value("DB_PASSWORD_URL", "postgres://a:b@h") == REDACTED


_text = st.text(alphabet="abc:/@?# ._-%", max_size=20)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="abcXYZ09._-%", max_size=8), st.text(alphabet="abcXYZ019!$&+,;=%@:", min_size=1, max_size=12),
       st.text(alphabet="abc:/?#._-%", max_size=20), _text)
def test_a_password_never_survives(user, password, host_and_path, before):
    shown = mask_url_passwords(f"{before} https://{user}:{password}@{host_and_path}")
    assert shown.endswith(f" https://{user}:{MASK}@{host_and_path}")
    assert mask_url_passwords(shown) == shown  # showing twice is showing once


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30), st.text(max_size=40))
def test_redaction_is_idempotent(name, value):
    once = redact_value(name, value)
    assert redact_value(name, once) == once


def test_the_shown_form_means_the_kept_value():
    url = "postgres://alice:hunter2pw@db/x"
    assert is_shown_form("DATABASE_URL", "postgres://alice:***@db/x", url)
    assert is_shown_form("HF_TOKEN", REDACTED, "hf_abc") and is_shown_form("HF_TOKEN", REDACTED, None)
    assert not is_shown_form("DATABASE_URL", "postgres://alice:new@db/x", url)  # a new value given
    assert not is_shown_form("LR", "0.1", "0.1") and not is_shown_form("LR", "0.2", "0.1")


def test_it_imports_nothing():
    """The agent imports it on every start: it must not pull in re (or anything else)."""
    tree = ast.parse(inspect.getsource(secrets))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
