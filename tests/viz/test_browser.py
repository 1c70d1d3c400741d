"""The visualizer's page in a real browser: Debian's headless Chromium, driven by Selenium.

Each check reads the DOM the page built from its model (the DOM contract is at the top of
``blockir/viz/static/viz.js``) and compares it with the model or the pass report. Screenshots go to
the test's directory, or to ``docs/img/`` with ``BLOCKIR_SCREENSHOTS=1`` (the README shows them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.viz.browser import chromium_marks, click, js, open_page, select_state, shot
from tests.viz.test_page import embedded

pytestmark = chromium_marks()


def visible_per_device(driver: Any) -> dict[str, int]:
    return js(
        driver,
        """const n = {};
        for (const g of document.querySelectorAll('g.node:not(.absent):not(.ghost)'))
            n[g.dataset.device] = (n[g.dataset.device] || 0) + 1;
        return n;""",
    )


def test_the_pass_list_folds_unchanged_passes_and_the_keys_step_through(driver: Any, pages: dict[str, Path]) -> None:
    open_page(driver, pages["mlp"])
    data = embedded(pages["mlp"].read_text())
    rows = js(driver, "return [...document.querySelectorAll('#passes li.state')].map(li => li.dataset.state)")
    assert rows == [str(k) for k in range(len(data["states"]))]
    folds = js(driver, "return [...document.querySelectorAll('#passes li.fold')].map(li => li.textContent)")
    assert folds == ["1 unchanged pass (deps) ▸"]  # deps changes nothing
    assert js(
        driver, "return document.querySelector('#passes li.state[data-state=\"3\"]').classList.contains('hidden')"
    )
    assert js(driver, "return document.querySelector('#passes li.selected').dataset.state") == "1"  # the first change
    body = driver.find_element("tag name", "body")
    body.send_keys("j")
    assert js(driver, "return document.querySelector('#passes li.selected').dataset.state") == "2"
    body.send_keys("j")  # onto the folded pass: it unfolds
    assert js(driver, "return document.querySelector('#passes li.selected').dataset.state") == "3"
    assert not js(
        driver, "return document.querySelector('#passes li.state[data-state=\"3\"]').classList.contains('hidden')"
    )
    body.send_keys("k")
    body.send_keys("k")
    assert js(driver, "return document.querySelector('#passes li.selected').dataset.state") == "1"


def test_nodes_per_device_and_the_diff_match_the_model_in_every_state(driver: Any, pages: dict[str, Path]) -> None:
    open_page(driver, pages["mlp"])
    data = embedded(pages["mlp"].read_text())
    for state in data["states"]:
        select_state(driver, state["index"])
        assert visible_per_device(driver) == state["stats"]["devices"]
        if state["index"]:
            counts = js(
                driver,
                "return ['added', 'ghost'].map(c => document.querySelectorAll('g.node.' + c).length)",
            )
            assert counts == [state["added"], state["removed"]], state["label"]
            summary = js(driver, "return document.getElementById('diff-summary').textContent")
            assert summary.startswith(f"+{state['added']} −{state['removed']} ~{state['structural']}")
            assert summary.endswith(f"· {state['annotated']} annotated")
    select_state(driver, 2)
    assert js(driver, "return document.querySelectorAll('g.node.added.copy').length") == data["states"][2]["added"] == 4


def test_removed_ops_stay_as_ghosts_in_their_place(driver: Any, pages: dict[str, Path], tmp_path: Path) -> None:
    open_page(driver, pages["prune"])
    ghosts = js(driver, "return [...document.querySelectorAll('g.node.ghost')].map(g => g.getAttribute('transform'))")
    data = embedded(pages["prune"].read_text())
    x, y = data["nodes"]["2"][:2]  # sigmoid, removed by prune
    assert ghosts == [f"translate({x:g},{y:g})"]


def test_clicking_a_copy_shows_its_lineage_and_its_origin_is_a_link(
    driver: Any, pages: dict[str, Path], tmp_path: Path
) -> None:
    open_page(driver, pages["mlp"])
    select_state(driver, 2)
    click(driver, "g.node.copy")
    lineage = js(driver, "return document.querySelector('#details .lineage').textContent")
    assert "inserted by insert-copies for" in lineage and " -> " in lineage
    assert js(driver, "return document.querySelector('#details .text').textContent").startswith("%")
    shot(driver, "lineage", tmp_path)
    origin = js(driver, "return document.querySelector('#details a.origin').dataset.id")
    click(driver, "#details a.origin")
    assert js(driver, "return document.querySelector('g.node.selected').dataset.id") == origin
    assert js(driver, "return document.querySelector('#details h2').textContent").startswith(f"Op #{origin} ")


def test_a_modified_op_shows_what_the_pass_changed(driver: Any, pages: dict[str, Path]) -> None:
    open_page(driver, pages["mlp"])
    select_state(driver, 4)  # streams gives every op its op_stream: an annotation, not a change of structure
    assert js(driver, "return document.querySelectorAll('g.node.modified, g.node.moved').length") == 0
    click(driver, "g.node.annotated:not(.copy)")
    changes = js(driver, "return [...document.querySelectorAll('#details table.changes tr')].map(r => r.textContent)")
    assert len(changes) == 1 and changes[0].startswith('op_stream(none) → "cpu')
    assert js(driver, "return document.querySelector('#details h2.changed').textContent") == (
        "Annotations changed since pass 3"
    )
    select_state(driver, 1)  # place sets op_device: structural
    click(driver, "g.node.modified:not(.copy)")
    changes = js(driver, "return [...document.querySelectorAll('#details table.changes tr')].map(r => r.textContent)")
    assert changes[0].startswith("op_device(none) → ")
    assert js(driver, "return document.querySelector('#details h2.changed').textContent") == "Changed since pass 0"


def test_search_counts_matches_and_enter_jumps_to_one(driver: Any, pages: dict[str, Path]) -> None:
    open_page(driver, pages["mlp"])
    select_state(driver, 2)
    box = driver.find_element("id", "search")
    box.send_keys("memcpy")
    assert js(driver, "return document.getElementById('search-count').textContent") == "0 of 4"
    box.send_keys("\n")
    assert js(driver, "return document.getElementById('search-count').textContent") == "1 of 4"
    assert js(driver, "return document.querySelector('g.node.selected').classList.contains('copy')")
    click(driver, "#filter")
    assert js(driver, "return document.querySelectorAll('g.node.dim:not(.absent)').length") > 0
    box.clear()
    box.send_keys("device:cpu:1")
    data = embedded(pages["mlp"].read_text())
    expected = data["states"][2]["stats"]["devices"]["cpu:1"]
    assert js(driver, "return document.getElementById('search-count').textContent") == f"0 of {expected}"


def test_the_timeline_and_the_graph_select_each_other(driver: Any, pages: dict[str, Path], tmp_path: Path) -> None:
    open_page(driver, pages["mlp"])
    data = embedded(pages["mlp"].read_text())
    lanes = js(driver, "return document.querySelectorAll('#timeline .lane-label').length")
    assert lanes == len(data["trace"]["lanes"])
    span = js(driver, "return document.querySelector('#timeline rect.span:not(.unlinked)').dataset.id")
    click(driver, f'#timeline rect.span[data-id="{span}"]')
    assert js(driver, "return document.querySelector('g.node.selected').dataset.id") == span
    assert js(driver, "return document.querySelector('#passes li.selected').dataset.state") == str(
        data["trace"]["state"]
    )
    assert js(driver, "return document.querySelectorAll('#timeline rect.span.hl').length") >= 1
    assert "span" in js(driver, "return document.querySelector('#details .spans').textContent")
    before = js(driver, "return document.querySelector('g.node:not(.absent) rect.box').style.fill")
    click(driver, "#heat")
    after = js(driver, "return document.querySelector('g.node:not(.absent) rect.box').style.fill")
    assert before != after
    shot(driver, "timeline", tmp_path)


def test_a_failing_pass_is_the_last_step_with_its_message(driver: Any, pages: dict[str, Path], tmp_path: Path) -> None:
    open_page(driver, pages["fail"])
    data = embedded(pages["fail"].read_text())
    last = js(driver, "return [...document.querySelectorAll('#passes li.state')].pop()")
    assert "failure" in last.get_attribute("class") and "explode — failed" in last.text
    click(driver, "#passes li.state.failure")
    error = js(driver, "return document.getElementById('error').textContent")
    assert "explode always fails" in error and data["failure"]["reproducer"] in error
    assert visible_per_device(driver) == data["states"][data["failure"]["received"]]["stats"]["devices"]
    shot(driver, "failure", tmp_path)


def test_a_sub_block_folds_and_unfolds(driver: Any, pages: dict[str, Path]) -> None:
    open_page(driver, pages["go"])
    count = "return document.querySelectorAll('g.node:not(.absent):not(.collapsed)').length"
    shown = js(driver, count)
    assert js(driver, "return document.querySelectorAll('g.cluster').length") == 1
    click(driver, 'g.cluster[data-block="1"] text')
    folded = js(driver, count)
    data = embedded(pages["go"].read_text())
    in_block = sum(1 for n in data["nodes"].values() if n[4] == 1)
    assert shown - folded == in_block - sum(  # ops of block 1 not in this state were not shown anyway
        1
        for i, n in data["nodes"].items()
        if n[4] == 1 and not any(o["id"] == int(i) and o["present"][1] == "1" for o in data["ops"])
    )
    click(driver, 'g.cluster[data-block="1"] text')
    assert js(driver, count) == shown


def test_the_page_logs_no_error_and_requests_nothing(driver: Any, pages: dict[str, Path]) -> None:
    for page in pages.values():
        open_page(driver, page)
        assert js(driver, "return performance.getEntriesByType('resource').length") == 0
        errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
        assert not errors, errors


def test_overview_screenshot(driver: Any, pages: dict[str, Path], tmp_path: Path) -> None:
    open_page(driver, pages["mlp"])
    select_state(driver, 2)
    assert json.loads(js(driver, "return JSON.stringify(window.vizTiming)"))["interactive"] > 0
    shot(driver, "overview", tmp_path)
