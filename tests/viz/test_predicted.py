"""The page shows the schedule ``auto-place`` predicted beside a run's measured one, and its reasoning per op."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import blockir as bir
from blockir.viz import page_data
from blockir.viz.page import render
from tests.passes.test_auto_place import COSTS, towers
from tests.viz.browser import in_chromium, js, open_page

PIPELINE = f"auto-place{{devices=cpu:0,cpu:1 costs={COSTS}}},default-device-pipeline"


def test_the_model_holds_the_predicted_schedule_and_why_each_op_went_where(tmp_path) -> None:
    program = towers(2, 32)
    data, collected = page_data(program, PIPELINE)
    predicted = data["predicted"]
    assert predicted["state"] == 1 and data["states"][1]["name"] == "auto-place"
    assert predicted["lanes"] == ["cpu", "cpu:1"]
    schedule = collected.records[0].details["schedule"]
    assert len(predicted["spans"]) == len(schedule.ops) == len(program.global_block().ops)
    assert predicted["makespan"] == max(start + dur for _, start, dur, _, _ in predicted["spans"])
    assert set(predicted["why"]) == {str(op.id) for op in program.global_block().ops}
    assert all(why.startswith("rank ") for why in predicted["why"].values())
    assert page_data(program, "default-device-pipeline")[0]["predicted"] is None


def test_with_a_run_the_page_has_both_timelines(tmp_path) -> None:
    program = towers(2, 32)
    scope = bir.Scope()
    for name in ("wa0", "wa1", "wb0", "wb1"):
        scope.set(name, np.eye(32, dtype="float32"))
    bs = bir.BuildStrategy()
    bs.auto_place, bs.place_devices, bs.cost_file, bs.fuse_gemm_epilogue = True, ["cpu:0", "cpu:1"], str(COSTS), False
    trace = tmp_path / "run.json"
    with bir.Executor(build_strategy=bs) as exe:
        exe.run(program, feed={"x": np.ones((4, 32), "float32")}, fetch_list=["y"], scope=scope, trace=trace)
    data, _ = page_data(program, PIPELINE, trace=trace)
    assert data["trace"] is not None and data["predicted"] is not None
    page = render(data)
    assert "predicted" in page and "Predicted by auto-place" in page


@in_chromium
def test_the_page_draws_the_predicted_lanes_and_explains_an_op_on_click(driver: Any, tmp_path: Path) -> None:
    program = towers(2, 32)
    page = tmp_path / "auto.html"
    data, _ = page_data(program, PIPELINE)
    page.write_text(render(data))
    open_page(driver, page)
    labels = js(driver, "return [...document.querySelectorAll('#lanes .lane-label')].map(t => t.textContent)")
    assert labels == ["predicted cpu", "predicted cpu:1"]
    assert js(driver, "return document.querySelectorAll('#lanes rect.span.predicted').length") == len(
        data["predicted"]["spans"]
    )
    op = program.global_block().ops[0]
    js(
        driver,
        "document.querySelector(arguments[0]).dispatchEvent(new MouseEvent('click', {bubbles: true}))",
        f'#lanes rect.span.predicted[data-id="{op.id}"]',
    )
    details = js(driver, "return document.querySelector('#details').textContent")
    assert "Predicted by auto-place" in details and data["predicted"]["why"][str(op.id)] in details
    assert js(driver, "return document.querySelectorAll('#lanes rect.span.predicted.hl').length") == 1
