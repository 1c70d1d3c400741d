"""Netron opens blockir's exported Paddle model (issue 19): ``save_inference_model(..., format="paddle")``'s
PREFIX.pdmodel and PREFIX.pdiparams, served by Netron's own server (``netron.serve``) on 127.0.0.1 and drawn in
Debian's headless Chromium (``tests/viz/browser.py``); and, where Node.js is, read by Netron's model readers without
a browser.

What is compared comes from the exported files and the executor's scope, not from a list written here: the op types
of the program (feed and fetch ops are the graph's inputs and outputs in Netron) and the bytes of every parameter.

Netron 9.3 served by ``netron.serve`` does three things by itself that the page is kept from doing (an init script
that runs before Netron's own):

- with no ``consent`` cookie it asks https://ipinfo.io for the country and, in the EU or when that fails, waits on
  a cookie dialog: the page gets the cookie before Netron looks;
- a packaged build (every version but 0.0.0) sends Google Analytics events with ``navigator.sendBeacon``: the page's
  ``sendBeacon`` records them in ``window.blockirBeacons`` and sends nothing;
- 180 days after the build date in ``<meta name="date">`` it shows only "Please update to the newest version.": the
  page drops that meta, so that the test does not expire with the pinned version.

Every other host name fails to resolve (``--host-resolver-rules``), and the test asserts from Chromium's network log
that the page asked for nothing but the server on 127.0.0.1 (``data:`` and ``blob:`` aside). The log is the page's:
what Netron's layout worker fetches (its modules, from the same server) is not in it.

Screenshot: ``netron.png`` in the test's directory, or in ``docs/img/`` with ``BLOCKIR_SCREENSHOTS=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest

import blockir as bir
from blockir.proto import framework_pb2 as pb
from tests.viz.browser import in_chromium

netron = pytest.importorskip("netron", minversion="9.3", reason="netron is not installed (pip install -e '.[dev]')")

ROOT = Path(__file__).resolve().parents[2]
NETRON_DIR = Path(netron.__file__).parent
RENDER_TIMEOUT = 60.0
CANARY = "http://blockir-netron-canary.invalid/"

pytestmark = pytest.mark.timeout(180)

# Runs in the page before Netron's scripts (module docstring).
QUIET_NETRON = """
window.blockirBeacons = [];
Object.defineProperty(Navigator.prototype, 'sendBeacon', {
    configurable: true,
    value: function (url) { window.blockirBeacons.push(String(url)); return true; },
});
document.cookie = 'consent=' + Date.now() + ';path=/';
document.addEventListener('DOMContentLoaded', () => {
    for (const meta of document.querySelectorAll('meta[name="date"]')) meta.remove();
});
"""

# Netron's reading of a model: the first graph's nodes (with the in-place ops it chains onto them), inputs, outputs
# and initializers (dims, raw bytes in hex). The same function runs in the page and in Node.
SUMMARY = """(model) => {
    const graph = model.modules[0];
    const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
    const nodes = graph.nodes.flatMap((node) => [node, ...(node.chain || [])]);
    const initializers = {};
    for (const node of nodes) {
        for (const argument of node.inputs) {
            for (const value of argument.value) {
                if (value.initializer) {
                    const tensor = value.initializer;
                    initializers[value.name] = {dims: tensor.type.shape.dimensions, hex: hex(tensor.values)};
                }
            }
        }
    }
    return {
        format: model.format,
        nodes: nodes.map((node) => node.type.name),
        inputs: graph.inputs.length,
        outputs: graph.outputs.length,
        initializers,
    };
}"""

# node READER NETRON_DIR MODEL: Netron's ModelFactoryService with a host and a context that read local files, as the
# browser's do over HTTP; prints SUMMARY of the model as JSON.
NODE_READER = (
    """
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as url from 'node:url';

const [dir, file] = process.argv.slice(2);
const load = (id) => import(url.pathToFileURL(path.join(dir, `${id.replace(/^\\.\\//, '')}.js`)).href);
const base = await load('base');
const view = await load('view');
const fail = (error) => { throw error; };
const host = {
    type: 'Node',
    require: load,
    asset: async (name) => fs.readFileSync(path.join(dir, name), 'utf-8'),
    exception: fail,
    event: () => {},
    environment: () => null,
};
const context = {
    identifier: path.basename(file),
    stream: new base.BinaryStream(fs.readFileSync(file)),
    asset: host.asset,
    require: load,
    fetch: async (name, encoding, folder) => {
        const data = fs.readFileSync(path.join(folder || path.dirname(file), name));
        return encoding ? new TextDecoder(encoding).decode(data) : new base.BinaryStream(data);
    },
    error: fail,
};
const model = await new view.ModelFactoryService(host).open(context);
process.stdout.write(JSON.stringify(("""
    + SUMMARY
    + """)(model)));
"""
)


@dataclass(frozen=True)
class Exported:
    model: Path  # PREFIX.pdmodel, next to PREFIX.pdiparams
    ops: list[str]  # the op types of the global block, in order, without feed and fetch
    feeds: int
    fetches: int
    params: dict[str, np.ndarray]  # the persistable tensors the program reads, from the scope it was saved from


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """An MLP (fc + relu, fc + softmax) saved with format="paddle", and what its files hold."""
    prefix = tmp_path_factory.mktemp("netron") / "mlp"
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        x = bir.data("x", shape=[-1, 8], dtype="float32")
        h = bir.layers.fc(x, size=16, act="relu")
        pred = bir.layers.fc(h, size=4, act="softmax")
    scope = bir.Scope()
    with bir.Executor("cpu") as exe:
        exe.run(startup, scope=scope)
        bir.io.save_inference_model(str(prefix), ["x"], [pred], exe, main_program=main, scope=scope, format="paddle")
    model = prefix.with_name(prefix.name + ".pdmodel")
    assert model.exists() and prefix.with_name(prefix.name + ".pdiparams").exists()
    block = pb.ProgramDesc.FromString(model.read_bytes()).blocks[0]
    types = [op.type for op in block.ops]
    params = {
        var.name: np.asarray(scope.get(var.name))
        for var in block.vars
        if var.persistable and var.type.type == pb.VarType.LOD_TENSOR
    }
    ops = [t for t in types if t not in ("feed", "fetch")]
    assert len(ops) >= 4 and params, (types, sorted(params))
    return Exported(model, ops, types.count("feed"), types.count("fetch"), params)


def check_reading(summary: dict[str, Any], exported: Exported) -> None:
    """Netron's reading (SUMMARY) is the exported program: its ops in order, its feeds and fetches, and every
    parameter with its shape and bytes (so Netron found PREFIX.pdiparams and read its tensors in Paddle's order)."""
    assert summary["format"].startswith("PaddlePaddle"), summary["format"]
    assert summary["nodes"] == exported.ops
    assert (summary["inputs"], summary["outputs"]) == (exported.feeds, exported.fetches)
    initializers = summary["initializers"]
    assert sorted(initializers) == sorted(exported.params)
    for name, value in exported.params.items():
        assert initializers[name]["dims"] == list(value.shape), name
        assert initializers[name]["hex"] == value.astype(value.dtype.newbyteorder("<")).tobytes().hex(), name


def chromium(width: int = 1000, height: int = 860) -> Any:
    """Headless Chromium as ``tests.viz.browser.chromium`` starts it, plus: a network log, no proxy, and no host name
    but 127.0.0.1 reachable."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or ""
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--no-proxy-server",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or ""), options=options)


@dataclass
class Page:
    driver: Any
    url: str
    console: list[dict[str, Any]]  # the console's messages until the graph was drawn
    requests: list[str] = field(default_factory=list)  # every URL the page asked for so far

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def drain(self) -> list[str]:
        """``requests``, with what Chromium's network log has added since the last call."""
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                self.requests.append(message["params"]["request"]["url"])
            elif message["method"] == "Network.webSocketCreated":
                self.requests.append(message["params"]["url"])
        return self.requests


def wait_until_drawn(page: Page) -> None:
    """Until Netron shows its graph (body class ``default``, SVG nodes drawn); fails at once on a message (Netron's
    errors and dialogs), or after RENDER_TIMEOUT."""
    deadline = time.monotonic() + RENDER_TIMEOUT
    while True:
        classes, nodes, message = page.js(
            """return [[...document.body.classList], document.querySelectorAll('#canvas g.graph-node').length,
                document.getElementById('message-text').innerText]"""
        )
        if {"alert", "message", "notification"} & set(classes):
            pytest.fail(f"Netron shows a message instead of the graph: {message!r} (body {classes})")
        if "default" in classes and nodes > 0:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"Netron drew no graph in {RENDER_TIMEOUT:.0f} s (body {classes}, {nodes} nodes)")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def page(exported: Exported) -> Iterator[Page]:
    """Netron's server on 127.0.0.1 (a free port) serving the model, and Chromium showing it; both stopped after the
    module's tests, whatever happened."""
    address = netron.serve(str(exported.model), address=("127.0.0.1", 0), browse=False)
    driver = None
    try:
        assert address[0] == "127.0.0.1" and address[1] > 0, address
        driver = chromium()
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": QUIET_NETRON})
        driver.set_page_load_timeout(RENDER_TIMEOUT)
        driver.set_script_timeout(30)
        url = f"http://127.0.0.1:{address[1]}/"
        driver.get(url)
        page = Page(driver, url, console=[])
        wait_until_drawn(page)
        page.console = driver.get_log("browser")
        page.drain()
        yield page
    finally:
        if driver is not None:
            driver.quit()
        netron.stop(address)
        deadline = time.monotonic() + 10
        while netron.status(address) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not netron.status(address), f"Netron's server on {address} did not stop"


def shot(page: Page, tmp_path: Path) -> Path:
    directory = ROOT / "docs" / "img" if os.environ.get("BLOCKIR_SCREENSHOTS") == "1" else tmp_path
    path = directory / "netron.png"
    page.driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    return path


@in_chromium
def test_netron_draws_every_op_of_the_exported_program(page: Page, exported: Exported) -> None:
    labels = page.js(
        """return [...document.querySelectorAll('#canvas g.graph-node')]
            .map((g) => g.querySelector('text').textContent)"""
    )
    assert sorted(labels) == sorted(exported.ops)  # the SVG's order is the layout's
    assert page.js("return document.querySelectorAll('#canvas g.graph-input').length") == exported.feeds
    assert page.js("return document.getElementById('message-text').innerText") == ""
    errors = [e for e in page.console if e["level"] in ("SEVERE", "ERROR")]
    assert not errors, errors


@in_chromium
def test_netron_names_the_format_and_reads_the_parameters(page: Page, exported: Exported, tmp_path: Path) -> None:
    summary = page.js(f"return ({SUMMARY})(window.__view__.model)")
    check_reading(summary, exported)
    page.js("document.getElementById('sidebar-model-button').click()")
    deadline = time.monotonic() + 10
    while summary["format"] not in (text := page.js("return document.getElementById('sidebar').innerText")):
        assert time.monotonic() < deadline, f"the model properties show no {summary['format']!r}: {text!r}"
        time.sleep(0.05)
    assert page.js("return document.getElementById('sidebar-title').innerText").lower() == "model properties"
    while not page.js(  # the sidebar slides in
        "const s = getComputedStyle(document.getElementById('sidebar')); return s.right === '0px' && s.opacity === '1'"
    ):
        assert time.monotonic() < deadline, "the model properties did not open"
        time.sleep(0.05)
    shot(page, tmp_path)


@in_chromium
def test_the_page_requests_nothing_outside_loopback(page: Page, exported: Exported) -> None:
    # A request to another host, made here: the log must show it, or an empty list of others would prove nothing.
    page.driver.execute_async_script(
        "const done = arguments[arguments.length - 1]; fetch(arguments[0]).catch(() => null).then(() => done());",
        CANARY,
    )
    requests = page.drain()
    assert CANARY in requests, requests
    port = urlsplit(page.url).port
    resources = page.js("return performance.getEntriesByType('resource').map((e) => e.name)")

    def local(url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme in ("data", "blob") or (parts.hostname, parts.port) == ("127.0.0.1", port)

    elsewhere = [u for u in [*requests, *resources] if u != CANARY and not local(u)]
    assert not elsewhere, elsewhere
    paths = {urlsplit(u).path for u in requests}
    stem = exported.model.stem
    assert {f"/data/{stem}.pdmodel", f"/data/{stem}.pdiparams"} <= paths, sorted(paths)


def node() -> list[str] | None:
    """Node.js, with what it needs to import Netron's ES modules (``.js`` files with no package.json saying so):
    Node 22.7+ detects them by itself, 20.10+ with ``--experimental-detect-module``. None below 20.10."""
    binary = shutil.which("node") or shutil.which("nodejs")
    if binary is None:
        return None
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    major, minor = (int(part) for part in version.lstrip("v").split(".")[:2])
    if (major, minor) < (20, 10):
        return None
    probe = subprocess.run([binary, "--experimental-detect-module", "-e", "0"], capture_output=True, timeout=30)
    return [binary, "--experimental-detect-module"] if probe.returncode == 0 else [binary]


def test_netrons_readers_read_the_model_in_node(exported: Exported, tmp_path: Path) -> None:
    command = node()
    if command is None:
        pytest.skip("Node.js 20.10 or later is not installed (apt-get install nodejs)")
    script = tmp_path / "read.mjs"
    script.write_text(NODE_READER)
    done = subprocess.run(
        [*command, str(script), str(NETRON_DIR), str(exported.model)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    check_reading(json.loads(done.stdout), exported)
