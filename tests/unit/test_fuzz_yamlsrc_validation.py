"""Property of the validation-error formatter (``robustctl.yamlsrc.format_validation_errors``): whatever
the key a file spells where none is allowed, its error is one line, at the key's own line, naming the
key path as :func:`~robustctl.yamlsrc.dotted_path` spells it.

Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from robustctl.yamlsrc import dotted_path, format_validation_errors, parse_yaml
from tests.unit.test_yamlsrc_validation import Doc

pytestmark = pytest.mark.fuzz


@given(key=st.text(max_size=120).filter(lambda k: k not in ("port", "user")))
def test_any_unknown_key_is_one_line_at_its_own_line(key: str) -> None:
    data, smap = parse_yaml("name: a\nssh:\n  port: 1\n  KEY: 2\n", "f.yaml")
    # put the drawn key where KEY is (any text, including what YAML cannot write as a plain key)
    data["ssh"][key] = data["ssh"].pop("KEY")
    smap.lines[("ssh", key)] = smap.lines.pop(("ssh", "KEY"))
    with pytest.raises(ValidationError) as info:
        Doc.model_validate(data)
    (line,) = format_validation_errors(info.value, smap, data)
    assert len(line.splitlines()) == 1
    assert line.startswith(f"f.yaml:4: {dotted_path(('ssh', key))}: unknown key ")
    assert len(line) <= 300  # the key is cut (80 characters) in the path and in the message
