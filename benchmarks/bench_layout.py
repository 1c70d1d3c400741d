"""Layout approaches for the visualizer, measured on the same graph: the one blockir uses and the candidates.

    python benchmarks/bench_layout.py [--layers 620] [--js DIR] [--timeout 300] [--runs 3]

The graph is the union graph the page lays out (every op of every pass of
``bench_viz.py``'s pipeline over its MLP, edges writer -> reader, node sizes
from the labels). Contenders, each where available:

- ``blockir``: :func:`blockir.viz.layout.layout` (longest-path ranks, barycentre order, no dummy nodes);
- ``igraph``: python-igraph's ``layout_sugiyama`` (``pip install python-igraph``), in a child process;
- ``dagre`` and ``elk``: dagre 0.8.5 (``dist/dagre.min.js``) and elkjs's layered algorithm
  (``lib/elk.bundled.js``) from ``npm install dagre@0.8.5 elkjs`` in DIR, run in headless Chromium.

Each is stopped after ``--timeout`` seconds. None of these packages is a dependency of blockir: this
script is how the layout was chosen (``docs/viz.md``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.viz.browser

from bench_viz import PIPELINE, big_program  # noqa: E402

from blockir.viz.layout import layout  # noqa: E402
from blockir.viz.model import build, collect  # noqa: E402
from tests.viz.browser import chromium  # noqa: E402


def _graph(layers: int) -> tuple[dict[str, Any], list[tuple[int, int]], dict[int, tuple[float, float]]]:
    data = build(collect(big_program(layers), PIPELINE), "bench")
    ids = sorted(int(i) for i in data["nodes"])
    index = {i: k for k, i in enumerate(ids)}
    edges = sorted({(index[s], index[d]) for s, d, _, _ in data["edges"]})
    sizes = {index[int(i)]: (n[2], n[3]) for i, n in data["nodes"].items()}
    return data, edges, sizes


def _blockir(data: dict[str, Any]) -> float:
    first_seen: dict[int, tuple[int, int, int]] = {}
    for op in data["ops"]:
        first_seen.setdefault(op["id"], (op["block"], op["present"].index("1"), op["v"]))
    start = time.perf_counter()
    layout(data["ops"], data["edges"], first_seen, data["blocks"])
    return time.perf_counter() - start


def _igraph_child(n: int, edges: list[tuple[int, int]], out: Any) -> None:
    import igraph

    graph = igraph.Graph(n=n, edges=edges, directed=True)
    start = time.perf_counter()
    graph.layout_sugiyama()
    out.put(time.perf_counter() - start)


def _igraph(n: int, edges: list[tuple[int, int]], timeout: float) -> str:
    try:
        import igraph  # noqa: F401
    except ImportError:
        return "not installed (pip install python-igraph)"
    out: multiprocessing.Queue[float] = multiprocessing.Queue()
    child = multiprocessing.Process(target=_igraph_child, args=(n, edges, out))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        return f"did not finish in {timeout:.0f} s"
    return f"{out.get():.2f} s"


_DAGRE = """
const g = new dagre.graphlib.Graph(); g.setGraph({rankdir: "TB"}); g.setDefaultEdgeLabel(() => ({}));
for (const [i, w, h] of NODES) g.setNode(String(i), {width: w, height: h});
for (const [s, d] of EDGES) g.setEdge(String(s), String(d));
const t0 = performance.now(); dagre.layout(g); window.done = (performance.now() - t0) / 1000;
"""
_ELK = """
const elk = new ELK();
const graph = {id: "root", layoutOptions: {"elk.algorithm": "layered", "elk.direction": "DOWN"},
  children: NODES.map(([i, w, h]) => ({id: String(i), width: w, height: h})),
  edges: EDGES.map(([s, d], k) => ({id: "e" + k, sources: [String(s)], targets: [String(d)]}))};
const t0 = performance.now();
elk.layout(graph).then(() => { window.done = (performance.now() - t0) / 1000; },
                       (e) => { window.done = "failed: " + e; });
"""


def _in_chromium(
    library: Path, script: str, nodes: list[list[float]], edges: list[tuple[int, int]], timeout: float
) -> str:
    if not library.is_file():
        return f"{library} not found (npm install dagre@0.8.5 elkjs)"
    driver = chromium()
    if driver is None:
        return "no Chromium"
    page = Path(tempfile.mkdtemp()) / "layout.html"
    data = f"const NODES = {json.dumps(nodes)}; const EDGES = {json.dumps(edges)};"
    page.write_text(f"<script>{library.read_text()}</script><script>{data}{script}</script>")
    try:
        driver.set_script_timeout(timeout)
        driver.set_page_load_timeout(timeout)
        driver.get(page.as_uri())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = driver.execute_script("return window.done")
            if done is not None:
                return f"{done:.2f} s" if isinstance(done, float | int) else str(done)
            time.sleep(0.5)
        return f"did not finish in {timeout:.0f} s"
    except Exception as e:  # a page that hangs the renderer: report it as what happened
        return f"did not finish in {timeout:.0f} s ({type(e).__name__})"
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=620)
    parser.add_argument("--js", type=Path, default=None, help="a directory with node_modules/dagre and elkjs")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    data, edges, sizes = _graph(args.layers)
    n = len(sizes)
    print(f"graph: {n} ops, {len(edges)} edges (the union over {len(data['states'])} states)")
    ours = [_blockir(data) for _ in range(args.runs)]
    print(f"blockir: median {statistics.median(ours):.2f} s (range {min(ours):.2f}-{max(ours):.2f})")
    print(f"igraph layout_sugiyama: {_igraph(n, edges, args.timeout)}")
    if args.js is not None:
        nodes = [[k, w, h] for k, (w, h) in sorted(sizes.items())]
        modules = args.js / "node_modules"
        for name, library, script in (
            ("dagre 0.8.5", "dagre/dist/dagre.min.js", _DAGRE),
            ("elkjs layered", "elkjs/lib/elk.bundled.js", _ELK),
        ):
            print(f"{name} in Chromium: {_in_chromium(modules / library, script, nodes, edges, args.timeout)}")


if __name__ == "__main__":
    main()
