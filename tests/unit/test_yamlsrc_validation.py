"""The one pydantic validation-error formatter (``robustctl.yamlsrc.format_validation_errors``): each
error is one ``FILE:LINE: key.path: message`` line, spelled the same for the inventory and the playbooks.

Cases: unknown key, missing key, wrong type, a list index in the path, a value from the environment,
a sub-mapping validated under a prefix, a union's member tags left out of the path (and a key the file
spells like one kept), order by line, the ``(+N more errors)`` limit, keys that are empty, not
printable or long; and the two callers (inventory, playbook) giving the same line for the same bad key.
The property over any key is in ``test_fuzz_yamlsrc_validation.py``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from robustctl.errors import ConfigError
from robustctl.inventory import load_inventory
from robustctl.playbooks.schema import PlaybookError, parse_playbook
from robustctl.yamlsrc import dotted_path, format_validation_errors, parse_yaml, validation_error_lines


class _Strict(BaseModel):  # the models below are shaped like an inventory's and a playbook's
    model_config = ConfigDict(extra="forbid")


class Port(_Strict):
    port: int = 22
    user: str | None = None


class Item(_Strict):
    name: str
    size: int = 0


class Jump(_Strict):
    goto: str


class Doc(_Strict):
    name: str
    ssh: Port = Port()
    items: list[Item] = []
    on_failure: Literal["abort", "continue"] | Jump = "abort"
    args: dict[str, Any] = {}


def lines_of(text: str, **kw: Any) -> list[str]:
    data, smap = parse_yaml(textwrap.dedent(text), "f.yaml")
    with pytest.raises(ValidationError) as info:
        Doc.model_validate(data)
    return format_validation_errors(info.value, smap, data, **kw)


def test_unknown_key_is_named_at_its_own_line() -> None:
    assert lines_of("name: a\nssh:\n  port: 2\n  prot: 3\n") == ["f.yaml:4: ssh.prot: unknown key 'prot'"]


def test_missing_key_is_named_at_its_parent_line() -> None:
    assert lines_of("ssh: {port: 2}\n") == ["f.yaml:1: name: required key is missing"]
    assert lines_of("name: a\nitems:\n  - size: 1\n") == ["f.yaml:3: items[0].name: required key is missing"]


def test_wrong_type_shows_the_value() -> None:
    assert lines_of("name: a\nssh:\n  port: x\n") == [
        "f.yaml:3: ssh.port: Input should be a valid integer, unable to parse string as an integer (got 'x')"
    ]
    # a mapping or list is not repeated in the message
    assert lines_of("name: a\nssh:\n  user: {a: 1}\n") == [
        "f.yaml:3: ssh.user: Input should be a valid string"
    ]


def test_list_index_in_the_path() -> None:
    text = "name: a\nitems:\n  - name: x\n  - name: y\n    size: big\n"
    assert lines_of(text) == [
        "f.yaml:5: items[1].size: Input should be a valid integer, unable to parse string as an integer "
        "(got 'big')"
    ]


def test_union_tags_are_left_out_and_alternatives_after_the_first_dropped() -> None:
    got = lines_of("name: a\non_failure: {goto: 5, bogus: 1}\n")
    assert got == [
        "f.yaml:2: on_failure: Input should be 'abort' or 'continue'",
        "f.yaml:2: on_failure.goto: Input should be a valid string (got 5)",
        "f.yaml:2: on_failure.bogus: unknown key 'bogus'",
    ]
    assert not any("Jump" in line or "literal[" in line for line in got)


def test_a_key_spelled_like_a_union_tag_is_still_named() -> None:
    assert (
        lines_of("name: a\non_failure:\n  Jump: x\n")[-1] == "f.yaml:3: on_failure.Jump: unknown key 'Jump'"
    )
    # the tag Jump and the key Jump in one location: each part is read as what makes the location fit
    assert lines_of("name: a\non_failure:\n  Jump: {goto: 1}\n")[1:] == [
        "f.yaml:2: on_failure.goto: required key is missing",
        "f.yaml:3: on_failure.Jump: unknown key 'Jump'",
    ]
    # a sub-mapping validated on its own (a playbook step's args), with a key called "str"
    data, smap = parse_yaml("steps:\n  - args:\n      str: 1\n", "p.yaml")
    with pytest.raises(ValidationError) as info:
        Port.model_validate(data["steps"][0]["args"])
    assert format_validation_errors(
        info.value, smap, data["steps"][0]["args"], prefix=("steps", 0, "args")
    ) == ["p.yaml:3: steps[0].args.str: unknown key 'str'"]


def test_prefix_leads_the_path_and_finds_the_line() -> None:
    data, smap = parse_yaml("steps:\n  - id: a\n  - id: b\n    args:\n      port: x\n", "p.yaml")
    args = data["steps"][1]["args"]
    with pytest.raises(ValidationError) as info:
        Port.model_validate(args)
    assert validation_error_lines(info.value, smap, args, prefix=("steps", 1, "args")) == [
        (5, "p.yaml:5: steps[1].args.port: Input should be a valid integer, unable to parse string as an "
         "integer (got 'x')")
    ]  # fmt: skip


def test_value_from_the_environment_names_its_source_and_comes_first() -> None:
    data, smap = parse_yaml("name: a\nssh:\n  prot: 1\n", "f.yaml")
    merged = {**data, "ssh": {**data["ssh"], "port": "-x"}}  # as if an environment variable set ssh.port

    def source(path: tuple[str | int, ...]) -> str | None:
        return "$PORT='-x'" if path == ("ssh", "port") else None

    with pytest.raises(ValidationError) as info:
        Doc.model_validate(merged)
    got = format_validation_errors(info.value, smap, merged, value_source=source)
    assert got[0].startswith("$PORT='-x': ssh.port: Input should be a valid integer")
    assert got[1:] == ["f.yaml:3: ssh.prot: unknown key 'prot'"]


def test_errors_are_ordered_by_line_and_the_limit_counts_the_rest() -> None:
    text = "items:\n  - name: a\n    size: x\nssh:\n  prot: 1\nbogus: 2\n"  # name is missing: line 1 (top)
    got = lines_of(text)
    assert [line.split(":")[1] for line in got] == ["1", "3", "5", "6"]
    assert got[0] == "f.yaml:1: name: required key is missing"
    assert lines_of(text, limit=1) == ["f.yaml:1: name: required key is missing (+3 more errors)"]
    assert lines_of(text, limit=4) == got


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("", "ssh.''"),
        ("a\tb", "ssh.'a\\tb'"),
        ("k" * 60, "ssh." + "k" * 60),
        ("k" * 100, "ssh." + "k" * 77 + "..."),
    ],
)
def test_odd_keys_are_one_line_and_visible(key: str, shown: str) -> None:
    data, smap = parse_yaml(f"name: a\nssh:\n  {key!r}: 1\n".replace("'", '"'), "f.yaml")
    with pytest.raises(ValidationError) as info:
        Doc.model_validate(data)
    (line,) = format_validation_errors(info.value, smap, data)
    assert line.startswith(f"f.yaml:3: {shown}: unknown key ") and "\n" not in line
    assert dotted_path(("ssh", key)) == shown


def test_inventory_and_playbook_spell_the_same_bad_key_alike(tmp_path: Path) -> None:
    key = "k" * 60  # cut at 40 characters by the playbook's path before, shown whole by the inventory
    inv = tmp_path / "cluster.yaml"
    inv.write_text(f"hosts:\n  - name: a\n    address: 127.0.0.2\nssh:\n  {key}: 1\n")
    with pytest.raises(ConfigError) as ie:
        load_inventory(inv, environ={})
    with pytest.raises(PlaybookError) as pe:
        parse_playbook(
            f"name: t\nsteps:\n  - id: d\n    kind: diagnose\n    args:\n      {key}: 1\n", "pb.yaml"
        )
    assert str(ie.value) == f"{inv}:5: ssh.{key}: unknown key '{key}'"
    assert list(pe.value.errors) == [f"pb.yaml:6: steps[0].args.{key}: unknown key '{key}'"]


def test_inventory_shows_the_first_error_by_line_and_counts_the_rest(tmp_path: Path) -> None:
    inv = tmp_path / "cluster.yaml"
    inv.write_text("hosts:\n  - name: a\n    address: 127.0.0.2\nssh:\n  prot: 1\n  port: x\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(inv, environ={})
    assert str(info.value) == f"{inv}:5: ssh.prot: unknown key 'prot' (+1 more errors)"
