"""The page at first sight, measured as rendered in a 1366x768 Chromium window: readable labels, zoom that keeps
what is seen, diff marks apart from device colours, structure apart from annotations, text that wraps, values
on edges, and the program as text linked to the graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.viz.browser import chromium_marks, click, js, open_page, select_state, shot
from tests.viz.test_page import embedded

pytestmark = chromium_marks()

# The screen rectangles of the text drawn on the nodes on screen: the SVG's label lines, stream badges, glyphs
# and device tags, and below zoom 1 the #labels overlay.
ON_SCREEN_TEXT = """
const pane = document.getElementById('graph').getBoundingClientRect(), out = [];
const inside = (r) => r.width > 0 && r.height > 0 && r.left >= pane.left && r.right <= pane.right &&
    r.top >= pane.top && r.bottom <= pane.bottom;
for (const t of document.querySelectorAll('g.node text, #labels span')) {
    if (!t.textContent || getComputedStyle(t).display === 'none') continue;
    const g = t.closest('g.node');
    if (g && getComputedStyle(g).display === 'none') continue;
    const r = t.getBoundingClientRect();
    if (inside(r)) out.push({id: g ? g.dataset.id : t.dataset.id, text: t.textContent,
                             cls: t.getAttribute('class') || 'overlay',
                             left: r.left, right: r.right, top: r.top, bottom: r.bottom, height: r.height});
}
return out;
"""


def on_screen_text(driver: Any) -> list[dict[str, Any]]:
    return js(driver, ON_SCREEN_TEXT)


def assert_readable(texts: list[dict[str, Any]]) -> None:
    """Each text at least 11 px tall (an 11px font's line box), and no two overlapping."""
    for t in texts:
        assert t["height"] >= 11, t
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            apart = a["right"] <= b["left"] + 0.5 or b["right"] <= a["left"] + 0.5
            apart = apart or a["bottom"] <= b["top"] + 0.5 or b["bottom"] <= a["top"] + 0.5
            assert apart, (a, b)


def graph_point(driver: Any, sx: float, sy: float) -> tuple[float, float]:
    """The graph's point (its own pixels) at pane point (sx, sy)."""
    v = js(driver, "return window.vizView()")
    return (sx - v["x"]) / v["k"], (sy - v["y"]) / v["k"]


@pytest.mark.parametrize("page", ["readme", "three"])
def test_the_page_opens_with_every_label_on_screen_readable(
    laptop: Any, pages: dict[str, Path], page: str, tmp_path: Path
) -> None:
    open_page(laptop, pages[page])
    data = embedded(pages[page].read_text())
    view = js(laptop, "return window.vizView()")
    assert view["k"] >= 1  # the labels' 11px font at 11 px or more
    texts = on_screen_text(laptop)
    labels = [t for t in texts if t["cls"] in ("t1", "t2", "t3")]
    assert len({t["id"] for t in labels}) >= 6, labels  # the start of the graph fills the pane with named ops
    assert_readable(texts)
    top = min(n[1] for n in data["nodes"].values())  # the start of the graph: its first rank is on screen
    assert any(data["nodes"][t["id"]][1] == top for t in labels)
    shot(laptop, f"first-{page}", tmp_path)


def test_long_graphs_use_the_width(pages: dict[str, Path]) -> None:
    data = embedded(pages["three"].read_text())
    right = max(n[0] + n[2] for n in data["nodes"].values())
    bottom = max(n[1] + n[3] for n in data["nodes"].values())
    assert 1.0 <= right / bottom <= 3.0, (right, bottom)  # not one tall column (a single column is 0.3)


def test_below_zoom_one_the_nodes_with_room_keep_a_readable_label(
    laptop: Any, pages: dict[str, Path], tmp_path: Path
) -> None:
    open_page(laptop, pages["three"])
    click(laptop, "#fit")
    js(laptop, "return new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert js(laptop, "return window.vizView().k") < 1
    overlay = js(laptop, "return [...document.querySelectorAll('#labels span')].map(s => s.dataset.id)")
    assert overlay, "no label at the fit zoom"
    texts = on_screen_text(laptop)
    assert {t["cls"] for t in texts} <= {"overlay"}  # the SVG's own (scaled down) labels are hidden
    assert_readable(texts)
    data = embedded(pages["three"].read_text())
    view = js(laptop, "return window.vizView()")
    for t in texts:  # each inside its node
        x, y, w, h = data["nodes"][t["id"]][:4]
        pane = js(laptop, "return document.getElementById('graph').getBoundingClientRect().toJSON()")
        left, top = pane["left"] + view["x"] + x * view["k"], pane["top"] + view["y"] + y * view["k"]
        assert left <= t["left"] and t["right"] <= left + w * view["k"] + 0.5, t
        assert top <= t["top"] and t["bottom"] <= top + h * view["k"] + 0.5, t
    assert js(laptop, "return document.getElementById('minimap').classList.contains('shown')") is False  # all fits
    shot(laptop, "fit", tmp_path)


def test_zoom_buttons_keep_the_visible_centre_and_the_wheel_the_pointer(laptop: Any, pages: dict[str, Path]) -> None:
    open_page(laptop, pages["three"])
    centre = js(
        laptop,
        """const [w, h] = [Math.max(...Object.values(arguments[0]).map(n => n[0] + n[2])),
                         Math.max(...Object.values(arguments[0]).map(n => n[1] + n[3]))];
        const v = window.vizView(), r = document.getElementById('graph').getBoundingClientRect();
        const x0 = Math.max(0, v.x), x1 = Math.min(r.width, v.x + w * v.k);
        const y0 = Math.max(0, v.y), y1 = Math.min(r.height, v.y + h * v.k);
        return [(x0 + x1) / 2, (y0 + y1) / 2];""",
        embedded(pages["three"].read_text())["nodes"],
    )
    before = graph_point(laptop, *centre)
    for button in ("#zoom-in", "#zoom-in", "#zoom-out"):
        click(laptop, button)
    after = graph_point(laptop, *centre)
    assert abs(after[0] - before[0]) < 0.5 and abs(after[1] - before[1]) < 0.5
    assert js(laptop, "return window.vizView().k") > 1.3
    assert on_screen_text(laptop)  # the graph is still on screen
    at = (200.0, 150.0)
    before = graph_point(laptop, *at)
    js(
        laptop,
        """const r = document.getElementById('graph').getBoundingClientRect();
        document.getElementById('graph').dispatchEvent(new WheelEvent('wheel',
            {deltaY: 240, clientX: r.left + 200, clientY: r.top + 150, bubbles: true, cancelable: true}));""",
    )
    after = graph_point(laptop, *at)
    assert abs(after[0] - before[0]) < 0.5 and abs(after[1] - before[1]) < 0.5


def test_the_minimap_shows_the_rest_and_moves_the_view(laptop: Any, pages: dict[str, Path]) -> None:
    open_page(laptop, pages["three"])  # at zoom 1 the graph is larger than the pane
    assert js(laptop, "return document.getElementById('minimap').classList.contains('shown')") is True
    before = js(laptop, "return window.vizView()")
    js(
        laptop,
        """const m = document.getElementById('minimap'), r = m.getBoundingClientRect();
        for (const type of ['pointerdown', 'pointerup'])
            m.dispatchEvent(new PointerEvent(type,
                {clientX: r.right - 10, clientY: r.bottom - 10, pointerId: 1, bubbles: true}));""",
    )
    after = js(laptop, "return window.vizView()")
    assert after["x"] < before["x"] and after["y"] < before["y"]  # towards the graph's bottom right corner


def test_diff_marks_differ_from_device_colours_in_line_style_and_glyph(laptop: Any, pages: dict[str, Path]) -> None:
    open_page(laptop, pages["three"])
    marks = {}
    for k, status in ((1, "modified"), (2, "added"), (4, "annotated")):
        select_state(laptop, k)
        marks[status] = js(
            laptop,
            """const g = document.querySelector('g.node.' + arguments[0]);
            const halo = getComputedStyle(g.querySelector('rect.halo'));
            return {glyph: g.querySelector('text.glyph').textContent, display: halo.display,
                    dash: halo.strokeDasharray, stroke: halo.stroke,
                    fills: [...document.querySelectorAll('g.node rect.box')].map(r => r.style.stroke)};""",
            status,
        )
    assert [marks[s]["glyph"] for s in ("modified", "added", "annotated")] == ["~", "+", "a"]
    assert marks["modified"]["dash"] != marks["added"]["dash"]  # told apart without colour
    device_colours = set(marks["added"]["fills"])
    for status in ("modified", "added"):
        assert marks[status]["stroke"] not in device_colours
    assert marks["annotated"]["display"] == "none"  # an annotation is a glyph, not a halo


def test_the_streams_pass_changes_no_structure(laptop: Any, pages: dict[str, Path]) -> None:
    for page in ("readme", "three"):
        open_page(laptop, pages[page])
        data = embedded(pages[page].read_text())
        streams = data["states"][-1]
        assert streams["label"] == "streams" and streams["structural"] == 0 and streams["annotated"] == streams["ops"]
        select_state(laptop, streams["index"])
        summary = js(laptop, "return document.getElementById('diff-summary').textContent")
        assert summary == f"+0 −0 ~0 · {streams['ops']} annotated"
        row = js(
            laptop,
            "return document.querySelector(arguments[0]).textContent",
            f'#passes li[data-state="{streams["index"]}"]',
        )
        assert f"~0 · {streams['ops']} annotated" in row


def test_long_text_wraps_and_cut_labels_show_in_full_on_hover(laptop: Any, pages: dict[str, Path]) -> None:
    open_page(laptop, pages["three"])
    select_state(laptop, 4)  # the streams pass's notes name every stream
    click(laptop, "g.node.copy")  # a memcpy: its lineage "from:" list
    for panel in ("side", "details"):
        assert js(laptop, f"const e = document.getElementById('{panel}'); return e.scrollWidth <= e.clientWidth"), panel
    open_page(laptop, pages["readme"])  # Adam's ops list their state: more than a node's 300 px
    data = embedded(pages["readme"].read_text())
    cut = js(
        laptop,
        """const hover = (g) => g.querySelector('rect.box').dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
        return [...document.querySelectorAll('g.node')]
            .filter(g => [...g.querySelectorAll('text')].some(t => t.textContent.endsWith('…')))
            .map(g => { hover(g); return [g.dataset.id, g.dataset.v, g.querySelector(':scope > title').textContent]; }
            );""",
    )
    assert cut, "no label is cut in this page"
    for _, v, title in cut:
        for line in data["ops"][int(v)]["label"]:
            assert line in title


def test_an_edge_names_its_value_and_a_variable_lights_its_writer_and_readers(
    laptop: Any, pages: dict[str, Path], tmp_path: Path
) -> None:
    open_page(laptop, pages["three"])
    data = embedded(pages["three"].read_text())
    select_state(laptop, 2)
    e = js(laptop, "return document.querySelector('path.edge:not(.absent)').dataset.e")
    src, _, name, _ = data["edges"][int(e)]
    shape, dtype, _ = data["vars"][0][name]
    assert js(laptop, f"return document.querySelector('path.edge[data-e=\"{e}\"] title')") is None  # made on hover
    js(
        laptop,
        "document.querySelector(arguments[0]).dispatchEvent(new MouseEvent('mouseover', {bubbles: true}))",
        f'path.edge[data-e="{e}"]',
    )
    title = js(laptop, f"return document.querySelector('path.edge[data-e=\"{e}\"] title').textContent")
    assert title == f"{name}: {dtype}[{', '.join(map(str, shape))}]"
    click(laptop, f'path.edge[data-e="{e}"]')
    ops = [v for v in data["ops"] if v["present"][2] == "1"]
    writers = sorted(str(v["id"]) for v in ops if name in v["outputs"])
    readers = sorted(str(v["id"]) for v in ops if name in v["inputs"])
    got = js(
        laptop,
        "return ['writer', 'reader'].map(c => [...document.querySelectorAll('g.node.' + c)]"
        ".map(g => g.dataset.id).sort())",
    )
    assert got == [writers, readers] and writers == [str(src)] and readers
    assert name in js(laptop, "return document.querySelector('#details .varinfo').textContent")
    click(laptop, f'g.node[data-id="{readers[0]}"]')  # from the op panel: a variable it reads
    click(laptop, f'#details a.var[data-var="{name}"]')
    assert js(laptop, "return [...document.querySelectorAll('g.node.writer')].map(g => g.dataset.id)") == writers
    shot(laptop, "variable", tmp_path)


def test_the_program_text_and_the_graph_select_each_other(laptop: Any, pages: dict[str, Path], tmp_path: Path) -> None:
    open_page(laptop, pages["three"])
    data = embedded(pages["three"].read_text())
    select_state(laptop, 2)  # insert-copies: 7 memcpy added, 16 ops changed
    click(laptop, '#tabs button[data-tab="text"]')
    state = data["states"][2]
    lines = js(laptop, "return [...document.querySelectorAll('#text-lines .line')].map(l => l.textContent)")
    want = ["  " + data["ops"][v]["text"] if v >= 0 else data["lines"][-1 - v] for v in state["text"]]
    assert lines == want  # as `blockir show` prints the program after the pass
    marks = js(
        laptop,
        "return ['add', 'mod', 'ann', 'del'].map(c => document.querySelectorAll('#text-lines .line.' + c).length)",
    )
    assert marks == [state["added"], state["structural"], state["annotated"], state["removed"]]
    click(laptop, "#text-lines .line.op.add")
    line_id = js(laptop, "return document.querySelector('#text-lines .line.sel').dataset.id")
    assert js(laptop, "return document.querySelector('g.node.selected').dataset.id") == line_id
    click(laptop, 'g.node[data-id="0"]')
    assert js(laptop, "return document.querySelector('#text-lines .line.sel').dataset.id") == "0"
    assert js(laptop, "return document.getElementById('program').hidden") is False
    box = laptop.find_element("id", "text-search")
    box.send_keys("memcpy")
    assert js(laptop, "return document.getElementById('text-count').textContent") == f"0 of {state['added']}"
    box.send_keys("\n")
    assert js(laptop, "return document.getElementById('text-count').textContent") == f"1 of {state['added']}"
    shot(laptop, "text", tmp_path)


def test_removed_ops_are_struck_through_in_the_text(laptop: Any, pages: dict[str, Path]) -> None:
    open_page(laptop, pages["prune"])
    data = embedded(pages["prune"].read_text())
    click(laptop, '#tabs button[data-tab="text"]')
    struck = js(laptop, "return [...document.querySelectorAll('#text-lines .line.del')].map(l => l.dataset.id)")
    assert struck == ["2"] and data["states"][1]["removed"] == 1  # sigmoid, removed by prune, in its place
    order = js(laptop, "return [...document.querySelectorAll('#text-lines .line.op')].map(l => l.dataset.id)")
    before = [str(data["ops"][v]["id"]) for v in data["states"][0]["text"] if v >= 0]
    assert [i for i in order if i in before] == before
