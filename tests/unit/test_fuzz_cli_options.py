"""Property-based test of :func:`robustctl.cli.options.build_request`: whatever parameters a command
passes, the request is built exactly when every field is given and no name is foreign to it, each field
holds the value of its name (a computed value winning over the parsed one), and anything else is one
UsageError naming the request and the field.

Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.cli.options import CLI_ONLY_OPTIONS, build_request
from robustctl.commands.evict import EvictRequest, ReturnRequest
from robustctl.commands.standby import StandbyActivateRequest, StandbySizeRequest
from robustctl.errors import UsageError

pytestmark = pytest.mark.fuzz

REQUESTS = (EvictRequest, ReturnRequest, StandbyActivateRequest, StandbySizeRequest)
FOREIGN = ("lock_timeout", "from_report", "all_hosts", "colour", "_private", "")
"""Names no request has: the CLI spellings the parameters were renamed from, and plain junk."""

VALUES = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=5)


@given(data=st.data())
def test_build_request_builds_exactly_the_complete_requests(data: st.DataObject) -> None:
    cls = data.draw(st.sampled_from(REQUESTS))
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    cli: dict[str, Any] = {name: data.draw(VALUES) for name in fields}
    for name in data.draw(st.lists(st.sampled_from(fields), max_size=2)):  # often none: complete
        cli.pop(name, None)
    extras = st.sampled_from([*sorted(CLI_ONLY_OPTIONS), *FOREIGN])
    cli |= data.draw(st.dictionaries(extras, VALUES, max_size=3))
    computed: dict[str, Any] = data.draw(
        st.dictionaries(st.sampled_from([*fields, *FOREIGN]), VALUES, max_size=2)
    )
    unknown = (set(cli) - CLI_ONLY_OPTIONS - set(fields)) | (set(computed) - set(fields))
    missing = set(fields) - set(cli) - set(computed)
    if unknown or missing:
        with pytest.raises(UsageError) as caught:
            build_request(cls, cli, **computed)
        message = str(caught.value)
        assert "\n" not in message and cls.__name__ in message
        assert repr(min(unknown)) in message if unknown else repr(min(missing)) in message
        return
    req = build_request(cls, cli, **computed)
    assert type(req) is cls
    for name in fields:
        assert getattr(req, name) == (computed[name] if name in computed else cli[name])
