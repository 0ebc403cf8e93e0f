"""agent/core/minimal.py's JSON, used where python3-minimal has neither _json nor json, writes and
reads exactly what json does with the agent's settings (compared with json itself)."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from runward.agent.core import minimal, wire

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                      max_leaves=20)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(values, st.booleans())
def test_dumps_is_jsons_and_loads_reads_it_back(v, sort_keys):
    assert minimal.dumps(v, sort_keys=sort_keys) == json.dumps(v, sort_keys=sort_keys)
    assert minimal.dumps(v, sort_keys=True, indent=1) == json.dumps(v, sort_keys=True, indent=1)
    # the records' writer (store.write_json): the same walk, each scalar by _json's C encoder
    assert wire.json_pretty(v) == json.dumps(v, sort_keys=True, indent=1)
    assert _same(minimal.loads(json.dumps(v)), v)
    assert _same(minimal.loads(json.dumps(v, indent=2, ensure_ascii=False)), v)


def test_loads_refuses_what_is_not_json():
    for bad in ["", "{", '{"a" 1}', "[1,]x", '"abc', "[1 2]", '{"a": 1} 2']:
        try:
            minimal.loads(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r}")
