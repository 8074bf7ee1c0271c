"""The sweep's HTML report in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``).

Three real ``robustctl sweep`` runs (the CLI as a user runs it, the embedded default scheduler) over
four ``transport: local`` hosts, each with its own seeded system files (``probe_root``) and its own
FakeNvml injection file, write the report. node2 shows XID 79 in the first and third sweep (a
hardware finding: named at once; two failures make it a lemon with ``lemon_failures: 2``), node3's
NIC goes down before the last sweep (a network finding seen once: pending, not named), node4's GPU runs hot (WARNING). The page is
then loaded from its file in Chromium driven by selenium through ``/usr/bin/chromedriver``:

* no console message of level SEVERE (the browser log), and no request but the page itself;
* the grid has exactly one cell per host × check, each with the status class of the sweep's
  ``--json`` and that class's background colour;
* the lemons table names node2, and the last sweep's time and duration are those of ``--json``.

A screenshot of the page (and the page itself) is kept as a test artefact under
``$ROBUSTCTL_ARTEFACTS_DIR`` (default ``artefacts/`` at the repository root, ignored by git):
``artefacts/sweep-html/sweep-report.png``.

Skipped, with the reason, only when Chromium or ChromeDriver is not installed (``bash
scripts/testbed-deps.sh`` installs them); under ``ROBUSTCTL_REQUIRE_TESTBED=1`` (``.ci/run``) their
absence fails the test instead, so CI cannot pass by skipping it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from robustctl.testing import fake_nvml
from tests.support.hostroot import seed_healthy_root
from tests.support.needs import needed

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
HOSTS = ("node1", "node2", "node3", "node4")
# The report's CSS colours (robustctl/report/html.py) as the browser computes them.
COLOURS = {
    "ok": "rgba(183, 228, 176, 1)",
    "warning": "rgba(255, 224, 138, 1)",
    "critical": "rgba(242, 139, 130, 1)",
    "unknown": "rgba(215, 174, 251, 1)",
    "not_applicable": "rgba(238, 238, 238, 1)",
    "none": "rgba(238, 238, 238, 1)",
}

pytestmark = [pytest.mark.slow, pytest.mark.external]  # headless Chromium


def _require_chromium() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        needed(
            f"{' and '.join(missing)} not installed (Debian chromium, chromium-driver: "
            "bash scripts/testbed-deps.sh)"
        )


def artefacts_dir() -> Path:
    """Where the screenshot goes: ``$ROBUSTCTL_ARTEFACTS_DIR/sweep-html`` (default ``REPO/artefacts``)."""
    base = Path(os.environ.get("ROBUSTCTL_ARTEFACTS_DIR") or REPO / "artefacts")
    out = base / "sweep-html"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _fleet(tmp: Path) -> Path:
    """Four local hosts with their own roots and NVML files; the inventory path."""
    entries = []
    for i, name in enumerate(HOSTS):
        seed_healthy_root(tmp / name / "root", name, i)
        gpus = list(fake_nvml.healthy_gpus(2))
        fake_nvml.write_injection(tmp / name / "nvml.json", gpus)
        entries.append(
            {
                "name": name,
                "transport": "local",
                "probe_root": str(tmp / name / "root"),
                "python": {
                    "path": sys.executable,
                    "wrapper": ["env", f"ROBUSTCTL_NVML_INJECTION={tmp / name / 'nvml.json'}"],
                },
                "state": "standby" if name == "node4" else "active",
            }
        )
    inv = {"hosts": entries, "gpus_per_host": 2, "sweep": {"lemon_failures": 2}}
    path = tmp / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return path


def _xid(tmp: Path, name: str, present: bool) -> None:
    """Give ``name`` an XID 79 in its kernel log now, or reseed a clean log."""
    root = tmp / name / "root"
    seed_healthy_root(root, name, HOSTS.index(name))
    if present:
        stamp = dt.datetime.now().strftime("%b %e %H:%M:%S")
        line = (
            f"{stamp} {name} kernel: [350100.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
            "name=<unknown>, GPU has fallen off the bus."
        )
        with (root / "var/log/kern.log").open("a") as f:
            f.write(line + "\n")


def _sweep(inv: Path, state: Path, html: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "robustctl", "sweep", "-i", str(inv), "--state", str(state),
         "--html", str(html), "--json", "-q"],
        capture_output=True, text=True, timeout=120,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1", "HOME": str(state.parent)},
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert proc.returncode == doc["exit_code"], proc.stderr
    return doc


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The report of the third of three sweeps, and that sweep's ``--json`` document."""
    _require_chromium()
    tmp = tmp_path_factory.mktemp("sweep-html")
    inv = _fleet(tmp)
    # node4: a hot GPU (WARNING at 85 °C) in every sweep
    hot = list(fake_nvml.healthy_gpus(2))
    hot[1] = dataclasses.replace(hot[1], temperature_c=86)
    fake_nvml.write_injection(tmp / "node4" / "nvml.json", hot)
    state, html = tmp / "state.db", tmp / "report.html"
    docs = []
    for present in (True, False, True):
        _xid(tmp, "node2", present)
        if len(docs) == 2:  # node3: NIC down in the last sweep only (network class, one sighting: pending)
            eth0 = tmp / "node3" / "root/sys/class/net/eth0"
            for key, value in (("operstate", "down"), ("carrier", "0"), ("speed", "-1")):
                (eth0 / key).write_text(value + "\n")
        docs.append(_sweep(inv, state, html))
    assert [d["exit_code"] for d in docs] == [2, 1, 2]
    pending = {h["host"]: h["pending"] for h in docs[-1]["hosts"] if h["pending"]}
    assert pending == {"node3": ["host.nic"]}
    return html, docs[-1]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium through selenium and /usr/bin/chromedriver, browser log kept."""
    _require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = Path(os.environ.get("TMPDIR", "/tmp")) / f"robustctl-chromium-{os.getpid()}"
    shutil.rmtree(profile, ignore_errors=True)
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--window-size=1400,900", f"--user-data-dir={profile}",
    ):  # fmt: skip
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_report_renders_in_chromium(report: tuple[Path, dict[str, Any]], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    html, doc = report
    url = html.resolve().as_uri()
    browser.get_log("browser"), browser.get_log("performance")  # drop the start page's entries
    browser.get(url)
    assert browser.title == "robustctl sweep"

    # no console errors; nothing fetched but the page itself (self-contained, no network)
    logs = browser.get_log("browser")
    assert [e for e in logs if e["level"] == "SEVERE"] == [], logs
    ours, network = set(), set()
    for entry in browser.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            req = msg["params"]["request"]["url"]
            if msg["params"].get("documentURL") == url:
                ours.add(req)
            if req.split(":", 1)[0] in ("http", "https", "ws", "wss"):
                network.add(req)
    assert ours == {url} and network == set(), (ours, network)

    # one cell per host × check, with the status the sweep reported and its colour
    want = {(h["host"], c): s for h in doc["hosts"] for c, s in h["checks"].items()}
    hosts = {h for h, _ in want}
    checks = {c for _, c in want}
    assert hosts == set(HOSTS) and len(checks) >= 10
    cells = browser.find_elements(By.CSS_SELECTOR, "#grid td.cell")
    seen: dict[tuple[str, str], str] = {}
    for cell in cells:
        key = (cell.get_attribute("data-host"), cell.get_attribute("data-check"))
        assert key not in seen, f"two cells for {key}"
        classes = set((cell.get_attribute("class") or "").split())
        status = next(c[2:] for c in classes if c.startswith("s-"))
        seen[key] = status
        assert cell.value_of_css_property("background-color") == COLOURS[status], key
    assert len(cells) == len(hosts) * len(checks)
    assert seen == {(h, c): want.get((h, c), "none") for h in hosts for c in checks}
    assert seen[("node2", "host.xid")] == "critical"
    assert seen[("node3", "host.nic")] == "critical"
    assert seen[("node4", "nvml.temperature")] == "warning"
    # rows in the sweep's order; the named host stands out
    rows = browser.find_elements(By.CSS_SELECTOR, "#grid tbody tr th")
    assert [r.text for r in rows] == [h["host"] for h in doc["hosts"]]
    assert [r.text for r in rows if "named" in (r.get_attribute("class") or "")] == ["node2"]
    # the verdict column is the policy's: node3's NIC is critical but pending, so node3 is a warning
    verdicts = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#grid tbody tr td:first-of-type")]
    assert verdicts == [h["status"] for h in doc["hosts"]]
    assert dict(zip(HOSTS, verdicts, strict=True))["node3"] == "warning"
    assert dict(zip(HOSTS, verdicts, strict=True))["node2"] == "critical"

    # the last sweep's time and duration, as --json says
    last = browser.find_element(By.ID, "last-sweep").text
    when = dt.datetime.fromtimestamp(doc["finished_at"], tz=dt.timezone.utc)
    assert when.strftime("%Y-%m-%d %H:%M:%S UTC") in last
    assert f"{doc['finished_at'] - doc['started_at']:.1f} s" in last and "4 host(s)" in last

    # the lemon and its evidence
    lemon_rows = browser.find_elements(By.CSS_SELECTOR, "#lemons tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in lemon_rows] == ["node2"]
    assert lemon_rows[0].find_elements(By.TAG_NAME, "td")[1].text == "2"
    assert "fallen off the bus" in lemon_rows[0].text
    # each host's recent history: node2's XID check went bad, recovered, went bad again (newest first)
    hist = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#history tbody tr")]
    xid = [
        r.split(" host.xid ")[1].split(" ")[:3] for r in hist if r.startswith("node2 ") and " host.xid " in r
    ]
    assert [" ".join(x) for x in xid[:2]] == ["ok → critical", "critical → ok"], hist

    out = artefacts_dir()
    shot = out / "sweep-report.png"
    browser.set_window_size(1400, max(900, int(browser.execute_script("return document.body.scrollHeight"))))
    assert browser.save_screenshot(str(shot))
    shutil.copyfile(html, out / "sweep-report.html")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    print(f"screenshot: {shot}")
