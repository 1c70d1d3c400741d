"""The visualizer on a program of about 5,000 ops: generation time, file size, time to interactive.

    python benchmarks/bench_viz.py [--layers 620] [--runs 3] [--no-browser]

The program is an MLP of ``--layers`` fc layers (width 16) with backward and SGD,
its layers spread over cpu, cpu:1, cpu:2, cpu:3 in four equal runs (620 layers:
4,973 ops), and the pipeline ``place,insert-copies,deps,streams{compute=2}``.
It prints the time to build the model (of which the layout), to write the page,
the page's size, and, unless ``--no-browser`` or no Chromium is installed, the
time until the page says it is interactive in headless Chromium (load, parse,
first render: ``window.vizReady``), median and range over ``--runs``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import blockir as bir
from blockir.viz import page
from blockir.viz.model import build, collect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.viz.browser import chromium, missing, open_page  # noqa: E402

PIPELINE = "place,insert-copies,deps,streams{compute=2}"
DEVICES = ("cpu", "cpu:1", "cpu:2", "cpu:3")


def big_program(layers: int) -> bir.Program:
    """The MLP of the module docstring."""
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        h = bir.layers.data("x", [-1, 16])
        label = bir.layers.data("y", [-1, 1])
        for k in range(layers):
            with bir.device_guard(DEVICES[k * len(DEVICES) // layers]):
                h = bir.layers.fc(h, 16 if k < layers - 1 else 1, act="relu" if k < layers - 1 else None)
        loss = bir.layers.mean(bir.layers.square_error_cost(h, label))
        bir.optimizer.SGD(0.01).minimize(loss)
    return main


def _summary(xs: list[float], unit: str = "s") -> str:
    return f"median {statistics.median(xs):.2f} {unit} (range {min(xs):.2f}-{max(xs):.2f}, {len(xs)} runs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=620)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--keep", help="also save the page here")
    args = parser.parse_args()
    program = big_program(args.layers)
    print(f"program: {sum(1 for _ in program.ops())} ops, pipeline {PIPELINE}")
    collect_s, build_s, write_s, sizes = [], [], [], []
    out = Path(tempfile.mkdtemp()) / "big.html"
    for _ in range(args.runs):
        t0 = time.perf_counter()
        collected = collect(program, PIPELINE)
        t1 = time.perf_counter()
        data = build(collected, "bench")
        t2 = time.perf_counter()
        html = page.render(data)
        out.write_text(html)
        t3 = time.perf_counter()
        collect_s.append(t1 - t0)
        build_s.append(t2 - t1)
        write_s.append(t3 - t2)
        sizes.append(len(html.encode()))
    ops = sum(1 for k in range(len(data["states"])) for o in data["ops"] if o["present"][k] == "1")
    print(f"states: {len(data['states'])}, op versions: {len(data['ops'])} (of {ops} ops over all states)")
    print(f"run the pipeline keeping programs: {_summary(collect_s)}")
    print(f"build the model (layout included):  {_summary(build_s)}")
    print(f"render and write the page:          {_summary(write_s)}")
    print(f"page size: {sizes[-1] / 1e6:.2f} MB")
    if args.keep:
        Path(args.keep).write_text(html)
    if not args.no_browser:
        tti = time_to_interactive(out, args.runs)
        if tti:
            print(f"time to interactive in headless Chromium: {_summary(tti)}")
        else:
            print(f"time to interactive: not measured ({missing()})")


def time_to_interactive(page: Path, runs: int) -> list[float]:
    """Seconds from navigation start until the page is interactive, a fresh headless Chromium per run."""
    times = []
    for _ in range(runs):
        driver = chromium()
        if driver is None:
            return []
        try:
            open_page(driver, page, timeout=120)
            times.append(driver.execute_script("return window.vizTiming.interactive") / 1e3)
        finally:
            driver.quit()
    return times


if __name__ == "__main__":
    main()
