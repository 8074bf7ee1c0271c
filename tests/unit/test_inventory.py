"""Inventory loading: strict keys with FILE:LINE, host ranges, hostile names, defaults, env."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from robustctl.config import HostState
from robustctl.errors import ConfigError, InventoryError
from robustctl.inventory import default_inventory, load_inventory
from robustctl.inventory.hostrange import collapse, compact_ranges, expand, validate_name
from robustctl.yamlsrc import MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES

GOOD = """\
ssh:
  user: robust
  port: 2222
  connect_timeout_s: 3
python:
  path: /opt/venv/bin/python
gpus_per_host: 8
hosts:
  - name: node[01-04]
    address: 127.0.0.[2-5]
    labels: {rack: r1}
  - name: spare1
    address: 127.0.0.9
    state: standby
    ssh: {port: 2200}
    gpus_per_host: 4
diagnose:
  concurrency: 8
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cluster.yaml"
    p.write_text(text)
    return p


def test_expands_ranges_and_merges_overrides(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, GOOD), environ={})
    assert [h.name for h in inv.hosts] == ["node01", "node02", "node03", "node04", "spare1"]
    assert [h.address for h in inv.hosts[:4]] == ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
    n1, spare = inv.hosts[0], inv.hosts[4]
    assert n1.ssh.user == "robust" and n1.ssh.port == 2222 and n1.gpus == 8
    assert n1.labels == {"rack": "r1"} and n1.python.path == "/opt/venv/bin/python"
    assert spare.ssh.port == 2200 and spare.ssh.user == "robust" and spare.ssh.connect_timeout_s == 3
    assert spare.gpus == 4 and spare.state is HostState.STANDBY
    assert inv.diagnose.concurrency == 8


def test_select_defaults_to_active_and_rejects_unknown(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, GOOD), environ={})
    assert [h.name for h in inv.select()] == ["node01", "node02", "node03", "node04"]
    assert [h.name for h in inv.select("node[02-03],spare1")] == ["node02", "node03", "spare1"]
    with pytest.raises(InventoryError, match=r"unknown host 'node08' \(and 1 more\)"):
        inv.select("node[08-09]")


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        (GOOD.replace("  port: 2222", "  prot: 2222"), r"cluster.yaml:3: ssh.prot: unknown key 'prot'"),
        (
            GOOD.replace("    labels: {rack: r1}", "    lables: {rack: r1}"),
            r"cluster.yaml:11: hosts\[0\].lables: unknown key",
        ),
        (
            GOOD.replace("gpus_per_host: 8", "gpus_per_host: many"),
            r"cluster.yaml:7: gpus_per_host: .*integer",
        ),
        (
            GOOD.replace("  concurrency: 8", "  concurrency: 0"),
            r"cluster.yaml:18: diagnose.concurrency: .*greater than",
        ),
        (GOOD.replace("    state: standby", "    state: broken"), r"cluster.yaml:14: hosts\[1\].state"),
        ("hosts: []\n", r"cluster.yaml:1: hosts: "),
        ("ssh: {}\n", r"cluster.yaml.*hosts: required key is missing"),
        ("- a\n- b\n", r"cluster.yaml:1: expected a mapping"),
        ("hosts:\n  - name: a\n    name: b\n", r"cluster.yaml:3: duplicate key 'name'"),
        ("hosts: [\n", r"cluster.yaml:2: YAML syntax error"),
        ("hosts:\n  - name: !!python/object:os.system {}\n", r"cluster.yaml:2: YAML error: .*constructor"),
        ("hosts:\n  - name: a\n? [a, b]\n: 1\n", r"cluster.yaml:3: complex mapping key"),
        ("hosts:\n  - name: a\n    labels: {d: 2024-13-45}\n", r"cluster.yaml: YAML error"),
    ],
)
def test_bad_files_name_file_and_line(tmp_path: Path, text: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        load_inventory(write(tmp_path, text), environ={})


@pytest.mark.parametrize(
    ("entry", "pattern"),
    [
        ("  - name: node[05-01]\n", r"cluster.yaml:2: bad host range 'node\[05-01\]'"),
        ("  - name: node[01-\n", r"bad host range"),
        ("  - name: 'a;rm -rf /'\n", r"invalid host name 'a;rm -rf /'"),
        ("  - name: '-oProxyCommand=sh'\n", r"invalid host name"),
        ("  - name: node[1-3]\n    address: 127.0.0.[2-3]\n", r"expands to 3 hosts but address .* to 2"),
        ("  - name: n1\n    address: '127.0.0.2;id'\n", r"invalid host address"),
        ("  - name: n[1-2]\n  - name: n2\n", r"cluster.yaml:3: duplicate host 'n2'"),
    ],
)
def test_bad_hosts(tmp_path: Path, entry: str, pattern: str) -> None:
    with pytest.raises(InventoryError, match=pattern):
        load_inventory(write(tmp_path, "hosts:\n" + entry), environ={})


def test_missing_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_inventory(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_inventory(tmp_path)


BILLION_LAUGHS = """\
a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
hosts: [*i]
"""


def test_billion_laughs_is_refused_quickly(tmp_path: Path) -> None:
    # 9**9 (387 million) nodes with aliases expanded; issue 9: grew past 6.5 GB within a minute.
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=rf"cluster.yaml:\d+: .*more than {MAX_YAML_NODES} nodes"):
        load_inventory(write(tmp_path, BILLION_LAUGHS), environ={})
    assert time.monotonic() - t0 < 10


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS as a memory bound: Linux")
def test_billion_laughs_stays_within_memory(tmp_path: Path) -> None:
    # in a child limited to 1 GiB of address space: an unbounded expansion dies there with MemoryError
    import resource
    import subprocess

    path = write(tmp_path, BILLION_LAUGHS)
    code = (
        "import sys; from pathlib import Path; from robustctl.errors import ConfigError\n"
        "from robustctl.inventory import load_inventory\n"
        "try:\n    load_inventory(Path(sys.argv[1]), environ={})\n"
        "except ConfigError as exc:\n    print('refused:', exc)\n"
    )
    limit = 1 << 30

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=cap,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused:" in out.stdout and "nodes with aliases expanded" in out.stdout


def test_aliases_within_the_budget_still_work(tmp_path: Path) -> None:
    text = "x: &lab {rack: r1}\nhosts:\n  - {name: a, labels: *lab}\n  - {name: b, labels: *lab}\n"
    with pytest.raises(ConfigError, match="unknown key 'x'"):  # the anchor holder is still an unknown key
        load_inventory(write(tmp_path, text), environ={})


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    depth = MAX_YAML_DEPTH + 5
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_inventory(write(tmp_path, "hosts: " + "[" * depth + "]" * depth + "\n"), environ={})
    with pytest.raises(ConfigError, match="nested too deeply"):  # past the composer's recursion limit
        load_inventory(write(tmp_path, "hosts: " + "[" * 5000 + "]" * 5000 + "\n"), environ={})


def test_oversize_file_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "big.yaml"
    with p.open("wb") as f:
        f.write(b"hosts:\n  - name: a\n")
        f.write(b"#" * MAX_YAML_BYTES)
    with pytest.raises(ConfigError, match=rf"big.yaml: .*larger than the {MAX_YAML_BYTES}-byte limit"):
        load_inventory(p, environ={})


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_character_device_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^/dev/zero: is a character device, not a regular file"):
        load_inventory(Path("/dev/zero"), environ={})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "inv.fifo"
    os.mkfifo(fifo)
    errors: list[BaseException] = []

    def load() -> None:
        try:
            load_inventory(fifo, environ={})
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    t = threading.Thread(target=load, daemon=True)  # a regression hangs in open(): never join forever
    t.start()
    t.join(10)
    assert not t.is_alive(), "loading a FIFO with no writer blocked"
    assert len(errors) == 1 and isinstance(errors[0], ConfigError)
    assert "is a FIFO, not a regular file" in str(errors[0])


def test_error_about_a_key_with_a_newline_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_inventory(write(tmp_path, 'hosts: [{name: a}]\nssh: {"a\\nb": 1}\n'), environ={})
    assert "\n" not in str(info.value) and "cluster.yaml:2: ssh.'a\\nb': unknown key" in str(info.value)


def test_control_character_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cluster.yaml:2: character U\+001F is not allowed"):
        load_inventory(write(tmp_path, "hosts:\n  - name: a\x1f\n"), environ={})


def test_not_utf8_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "cluster.yaml"
    p.write_bytes(b"hosts:\n  - name: \xff\n")
    with pytest.raises(ConfigError, match="cluster.yaml:2: not UTF-8"):
        load_inventory(p, environ={})


def test_env_overrides_file(tmp_path: Path) -> None:
    inv = load_inventory(
        write(tmp_path, GOOD), environ={"ROBUSTCTL_CONCURRENCY": "3", "ROBUSTCTL_SSH_USER": "ops"}
    )
    assert inv.diagnose.concurrency == 3
    assert inv.hosts[0].ssh.user == "ops"


def test_bad_env_value_names_the_variable_not_the_file(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^\$ROBUSTCTL_CONCURRENCY='many': diagnose.concurrency: .*integer"
    ):
        load_inventory(write(tmp_path, GOOD), environ={"ROBUSTCTL_CONCURRENCY": "many"})
    with pytest.raises(ConfigError, match=r"^\$ROBUSTCTL_DEADLINE='-1': diagnose.deadline_s: .*greater"):
        load_inventory(write(tmp_path, "hosts: [{name: a}]\n"), environ={"ROBUSTCTL_DEADLINE": "-1"})


@pytest.mark.parametrize("section", ["diagnose: 5", "diagnose: [1, 2]", "ssh: text"])
def test_env_over_a_non_mapping_section_is_a_config_error(tmp_path: Path, section: str) -> None:
    # issue 9: TypeError (exit 3) from ROBUSTCTL_CONCURRENCY=8 over `diagnose: 5`
    text = "hosts: [{name: a}]\n" + section + "\n"
    env = {"ROBUSTCTL_CONCURRENCY": "8", "ROBUSTCTL_SSH_USER": "ops"}
    with pytest.raises(ConfigError, match=rf"^{tmp_path}/cluster.yaml:2: (diagnose|ssh): .*dictionary"):
        load_inventory(write(tmp_path, text), environ=env)


def test_embedded_default_is_local_with_this_python() -> None:
    inv = default_inventory()
    (h,) = inv.hosts
    assert h.name == "localhost" and h.transport == "local" and h.python.path == sys.executable
    assert inv.select() == [h]


def test_hostrange_helpers() -> None:
    assert expand("node[001-003,7],login") == ["node001", "node002", "node003", "node7", "login"]
    assert collapse(["n1", "n2", "n3", "n7"]) == "n[1-3,7]"
    with pytest.raises(InventoryError):
        expand("   ")
    with pytest.raises(InventoryError):
        expand("n[1-99999999]")
    assert validate_name("gpu-node_01.dc1") == "gpu-node_01.dc1"
    for bad in ["a b", "$(id)", "a|b", "", "-x", "a`b`"]:
        with pytest.raises(InventoryError):
            validate_name(bad)


def test_compact_ranges() -> None:
    # one function for ranks, group indices and link numbers (stacks, evict, the NVLink check, --ranks)
    assert compact_ranges([0, 1, 2, 3, 4, 5, 7]) == "0-5,7"
    assert compact_ranges([3, 1, 2, 9, 11, 10]) == "1-3,9-11"
    assert compact_ranges([4, 4, 5, 9]) == "4-5,9"
    assert compact_ranges(range(16, 24)) == "16-23"
    assert compact_ranges([7]) == "7" and compact_ranges([]) == ""


JOBS = """\
gpus_per_host: 4
hosts:
  - name: node[01-08]
    address: 127.0.0.[2-9]
jobs:
  llama:
    hosts: node[01-08]
    layout: {tp: 2, pp: 4, dp: 4}
    process: {match: 'train\\.py'}
"""


def test_jobs_resolve_in_rank_order(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, JOBS), environ={})
    job = inv.job("llama")
    assert [h.name for h in job.hosts][:2] == ["node01", "node02"]
    assert job.world_size == 32 and job.ranks_per_host == 4
    assert job.layout.order == "tp-cp-ep-dp-pp"
    assert job.process is not None and job.process.rank_env == "RANK"
    with pytest.raises(InventoryError, match="unknown job 'gpt' .*llama"):
        inv.job("gpt")


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (
            ("dp: 4}", "dp: 2}"),
            r"cluster.yaml:6: job llama: layout .* is 16 ranks, but 8 hosts x 4 ranks per host = 32",
        ),
        (
            ("hosts: node[01-08]\n    layout", "hosts: node[01-09]\n    layout"),
            r"job llama: host 'node09' is not in",
        ),
        (("dp: 4}", "dp: 4, order: tp-tp-ep-dp-pp}"), r"layout order .* repeats"),
        (("dp: 4}", "dp: 4, order: tp-dp}"), r"jobs.llama.layout.order"),
        (("dp: 4}", "dp: 4, xp: 2}"), r"unknown key 'xp'"),
        (
            ("{match: 'train\\.py'}", "{match: 'train(.py'}"),
            r"cluster.yaml:9: jobs.llama.process.match: .*invalid regular expression",
        ),
        (
            ("{match: 'train\\.py'}", "{match: 'train', rank_cmdline: '--rank=[0-9]+'}"),
            r"cluster.yaml:9: jobs.llama.process.rank_cmdline: .*needs a group",
        ),
    ],
)
def test_bad_jobs(tmp_path: Path, change: tuple[str, str], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        load_inventory(write(tmp_path, JOBS.replace(*change)), environ={})


def test_scheduler_slurm_settings(tmp_path: Path) -> None:
    base = "hosts: [{name: n1, address: 127.0.0.2}]\n"
    text = base + "scheduler: {kind: slurm, slurm: {conf: /etc/slurm/slurm.conf, requeue_settle_s: 2}}\n"
    load_inventory(write(tmp_path, text), environ={})
    bad = base + "scheduler: {kind: slurm, slurm: {partition: gpu}}\n"
    with pytest.raises(ConfigError, match=r"scheduler.slurm.partition: unknown key"):
        load_inventory(write(tmp_path, bad), environ={})


# Issue 21, item 10: a key that YAML reads as another type than a string is named at its own line,
# as written, instead of at line 1 as ``None`` or ``[1]``.
@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("hosts:\n  - name: n1\nnull: 3\n", r"^\S*cluster.yaml:3: null: key 'null' reads as null"),
        ("hosts:\n  - name: n1\n~: 3\n", r"cluster.yaml:3: ~: key '~' reads as null"),
        ("hosts:\n  - name: n1\n1: 3\n", r"cluster.yaml:3: 1: key '1' reads as an integer"),
        ("hosts:\n  - name: n1\n0x1F: 3\n", r"cluster.yaml:3: 0x1F: key '0x1F' reads as an integer"),
        ("hosts:\n  - name: n1\n\n\n2.5: 3\n", r"cluster.yaml:5: 2.5: key '2.5' reads as a number"),
        (
            "hosts:\n  - name: n1\n    labels:\n      rack: r1\n      2024-01-01: x\n",
            r"cluster.yaml:5: hosts\[0\].labels.2024-01-01: key '2024-01-01' reads as a date",
        ),
        (
            "hosts:\n  - name: n1\njobs:\n  j:\n    hosts: n1\n    process:\n      match: x\n      yes: 1\n",
            r"cluster.yaml:8: jobs.j.process.yes: key 'yes' reads as a boolean",
        ),
        ("hosts:\n  - {name: n1,\n     true: 1}\n", r"cluster.yaml:3: hosts\[0\].true: .*a boolean"),
        ("hosts:\n  - name: n1\n? \n: 3\n", r"cluster.yaml:3: '': key '' reads as null"),
    ],
)
def test_a_key_that_is_no_string_is_named_at_its_line(tmp_path: Path, text: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as info:
        load_inventory(write(tmp_path, text), environ={})
    assert "\n" not in str(info.value) and "quote it" in str(info.value)


def test_a_quoted_key_is_a_name(tmp_path: Path) -> None:
    text = "hosts:\n  - name: n1\n    labels: {'1': a, 'null': b, '2024-01-01': c, !!str yes: d}\n"
    (host,) = load_inventory(write(tmp_path, text), environ={}).hosts
    assert host.labels == {"1": "a", "null": "b", "2024-01-01": "c", "yes": "d"}


# Issue 21, item 2: a placeholder's width or precision is read from its spec, never formatted first.
LAUNCH = """\
hosts:
  - name: n[1-2]
    address: 127.0.0.[2-3]
jobs:
  j:
    hosts: n[1-2]
    layout: {dp: 2}
    process: {match: train}
    launch:
      command: [train, "ITEM"]
"""


@pytest.mark.parametrize(
    ("item", "pattern"),
    [
        (
            "{job:>1000000000}",
            r"\{job:>1000000000\}: width 1000000000 is more than 4096",
        ),
        ("{job:>5000000000}", r"width 5000000000 is more than 4096"),
        ("{rank:0" + "9" * 30 + "d}", r"width of 30 digits is more than 4096"),
        ("{rank:.100000f}", r"precision 100000 is more than 4096"),
        ("{job:x^" + "\u0669" * 7 + "}", r"width \u0669{7} is more than 4096"),  # ARABIC-INDIC NINE
        ("{job:>4000}{job:>200}", r"\{job:>200\}: filled in, the template is longer than 4096"),
        ("{job:>5x5}", r"'>5x5' is not a format spec"),
        ("{rank:q}", r"Unknown format code 'q'"),
    ],
)
def test_huge_format_widths_are_refused_without_formatting(tmp_path: Path, item: str, pattern: str) -> None:
    import tracemalloc

    path = write(tmp_path, LAUNCH.replace("ITEM", item))
    tracemalloc.start()
    try:
        with pytest.raises(
            ConfigError, match=rf"^{path}:9: jobs.j.launch: command\[1\]: placeholder .*{pattern}"
        ):
            load_inventory(path, environ={})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"loading allocated {peak} bytes at its peak"


@pytest.mark.parametrize(
    ("item", "filled"),
    [
        ("--rank={rank:05d}", "--rank=00001"),
        ("{job:*^9}", "****j****"),
        ("{rank:\u0665}", "    1"),  # a width in ARABIC-INDIC digits, as format reads it
        ("{rank:.2f}", "1.00"),
        ("{job:>4096}", " " * 4095 + "j"),
    ],
)
def test_bounded_format_specs_fill_as_str_format(tmp_path: Path, item: str, filled: str) -> None:
    from robustctl.jobs.launch import render_launch

    job = load_inventory(write(tmp_path, LAUNCH.replace("ITEM", item)), environ={}).job("j")
    assert render_launch(job, job.hosts, None)[1].argv[1] == filled


def test_a_filled_template_past_linux_argument_limit_is_a_config_error(tmp_path: Path) -> None:
    """``{job}`` 800 times over a job name of 1000 characters: 800 KB, past ``MAX_FILLED_TEXT``."""
    from robustctl.jobs.launch import MAX_FILLED_TEXT, render_launch

    name = "j" * 1000
    text = LAUNCH.replace("ITEM", "{job}" * 800).replace("  j:\n", f"  {name}:\n")
    text = text.replace("    launch:\n", "    launch:\n      log_dir: /tmp/logs\n")
    job = load_inventory(write(tmp_path, text), environ={}).job(name)
    with pytest.raises(
        ConfigError, match=rf"^launch.command\[1\]: filled in, .* longer than {MAX_FILLED_TEXT}"
    ):
        render_launch(job, job.hosts, None)


# Issue 21, item 11: a pattern that can backtrack for ever is refused at load.
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("match", "(a+)+"),
        ("match", "(a*)*"),
        ("match", r"train(?:\s*x)+$"),
        ("match", r"(?:(\w+,)*;)+"),
        ("match", r"(a|b+)*"),
        ("match", r"(\w+,){1,1000}"),
        ("match", r"(?=(a+)+)"),
        ("rank_cmdline", r"--rank=((\d+)*)"),
    ],
)
def test_nested_repetition_is_refused_at_load(tmp_path: Path, field: str, value: str) -> None:
    line = (
        f"    process: {{match: 'train', {field}: '{value}'}}"
        if field != "match"
        else f"    process: {{match: '{value}'}}"
    )
    text = JOBS.replace("    process: {match: 'train\\.py'}", line)
    with pytest.raises(ConfigError, match=rf"cluster.yaml:9: jobs.llama.process.{field}: nested repetition"):
        load_inventory(write(tmp_path, text), environ={})


def test_a_progress_pattern_with_nested_repetition_is_refused(tmp_path: Path) -> None:
    text = JOBS + "    progress: {log: /var/log/train.log, pattern: '(?:it\\s*)+(?P<step>\\d+)'}\n"
    with pytest.raises(ConfigError, match=r"cluster.yaml:10: jobs.llama.progress.pattern: nested repetition"):
        load_inventory(write(tmp_path, text), environ={})


@pytest.mark.parametrize(
    "value",
    [r"(\d+\.){3}\d+", r"pretrain_gpt\.py.*--tp=\d+", r"(a|aa)+", r"(?:[0-9a-f]{1,4}:){7}", r"x{2}(y+)"],
)
def test_patterns_without_nested_repetition_load(tmp_path: Path, value: str) -> None:
    text = JOBS.replace("{match: 'train\\.py'}", f"{{match: '{value}'}}")
    job = load_inventory(write(tmp_path, text), environ={}).job("llama")
    assert job.process is not None and job.process.match == value


def test_a_pattern_past_its_length_bound_is_refused(tmp_path: Path) -> None:
    from robustctl.config import MAX_PATTERN_CHARS

    text = JOBS.replace("{match: 'train\\.py'}", "{match: '" + "x" * (MAX_PATTERN_CHARS + 1) + "'}")
    with pytest.raises(
        ConfigError, match=rf"cluster.yaml:9: jobs.llama.process.match: .*at most {MAX_PATTERN_CHARS}"
    ):
        load_inventory(write(tmp_path, text), environ={})
