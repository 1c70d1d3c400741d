"""Headless Chromium through Selenium, for the tests marked ``browser`` and ``benchmarks/bench_viz.py``.

Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``, ``/usr/bin/chromedriver``): the
browsers Selenium or Playwright would download are not reachable here. :func:`chromium` returns None
where either binary or selenium is missing, so that callers can skip.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["chromium", "chromium_marks", "click", "in_chromium", "js", "missing", "open_page", "select_state", "shot"]

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]


def missing() -> str | None:
    """Why no headless Chromium can be started here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for binary, package in (("chromium", "chromium"), ("chromedriver", "chromium-driver")):
        if shutil.which(binary) is None:
            return f"{binary} is not installed (apt-get install {package})"
    return None


def chromium_marks() -> list[Any]:
    """The marks of a test that drives headless Chromium: ``browser``, and a skip naming what is missing."""
    import pytest

    reason = missing()
    return [pytest.mark.browser, pytest.mark.skipif(reason is not None, reason=str(reason))]


def in_chromium(test: T) -> T:
    """``test`` with :func:`chromium_marks`."""
    for mark in chromium_marks():
        test = mark(test)
    return test


def chromium(width: int = 1500, height: int = 900) -> Any:
    """A new headless Chromium (a Selenium driver) whose console messages can be read, or None."""
    if missing() is not None:
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or ""
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or ""), options=options)


def open_page(driver: Any, path: Path, timeout: float = 60.0) -> float:
    """Load the page at ``path`` and wait until it says it is interactive; the seconds that took."""
    start = time.perf_counter()
    driver.get(path.resolve().as_uri())
    while not driver.execute_script("return window.vizReady === true"):
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"{path}: not interactive after {timeout:.0f} s")
        time.sleep(0.02)
    return time.perf_counter() - start


def shot(driver: Any, name: str, tmp_path: Path) -> Path:
    """A screenshot ``viz-NAME.png`` in ``tmp_path``, or in ``docs/img/`` with ``BLOCKIR_SCREENSHOTS=1``."""
    directory = ROOT / "docs" / "img" if os.environ.get("BLOCKIR_SCREENSHOTS") == "1" else tmp_path
    path = directory / f"viz-{name}.png"
    driver.save_screenshot(str(path))
    if path.stat().st_size <= 10_000:
        raise AssertionError(f"{path}: a blank screenshot ({path.stat().st_size} bytes)")
    return path


def js(driver: Any, script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


def click(driver: Any, selector: str) -> None:
    """A click on the first element ``selector`` finds (dispatched: it need not be on screen)."""
    js(driver, "document.querySelector(arguments[0]).dispatchEvent(new MouseEvent('click', {bubbles: true}))", selector)


def select_state(driver: Any, k: int) -> None:
    """Show the program after pass ``k`` (unfolding the folded passes)."""
    js(driver, "document.querySelectorAll('#passes li.fold').forEach(f => f.click())")
    click(driver, f'#passes li.state[data-state="{k}"]')
