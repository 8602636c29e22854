"""A report opens in a real browser (headless Chromium) and the charts are painted."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.reports import write_html
from tests.reports import samples
from tests.reports.browser import CRITICAL_RGB, distinct_colours, pixels_near, screenshot


@pytest.mark.server  # headless Chromium
class TestOpensInChromium:
    """Chromium renders the self-contained file: a screenshot full of colour, and the Gantt's
    red critical-path bars (only inside the embedded PNG) show on it."""

    def test_runbook_report_screenshot(self, tmp_path: Path) -> None:
        html = write_html(samples.runbook(), tmp_path / "runbook.html")
        image = screenshot(html, tmp_path / "shot.png")

        assert image.size == (1100, 1600)
        assert distinct_colours(image) > 500, "the screenshot is (nearly) blank"
        # The bars of the four critical tasks are several thousand red pixels.
        assert pixels_near(image, CRITICAL_RGB) > 2000
