"""A report opens in a real browser (headless Chromium) and the charts are painted."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.reports import write_html
from orchestrator.reports.charts import BAND_COLORS
from tests.reports import samples
from tests.reports.browser import (
    CRITICAL_RGB,
    HOLD_RGB,
    band_shade,
    distinct_colours,
    pixels_near,
    screenshot,
)


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

    def test_gate_chart_shows_its_holds(self, tmp_path: Path) -> None:
        """The gated task's chart is painted: its hold spans (the only pale orange of a runbook
        page) show, and taking the readings away takes them away."""
        gated = screenshot(write_html(samples.runbook(), tmp_path / "gated.html"),
                           tmp_path / "gated.png", size=(1100, 4000))  # fmt: skip
        report = samples.runbook()
        for task in report.tasks:
            task.gates = []
        ungated = screenshot(write_html(report, tmp_path / "ungated.html"),
                             tmp_path / "ungated.png", size=(1100, 4000))  # fmt: skip

        # Two holds of 3 s each, shaded across both panels: tens of thousands of pixels.
        assert pixels_near(gated, HOLD_RGB, tolerance=6) > 10_000
        assert pixels_near(ungated, HOLD_RGB, tolerance=6) == 0

    def test_load_curve_shows_every_band(self, tmp_path: Path) -> None:
        """Each watched metric's panel is shaded with all five bands, BOLD to BACKOFF."""
        image = screenshot(write_html(samples.load_test(), tmp_path / "loadtest.html"),
                           tmp_path / "shot.png", size=(1100, 3000))  # fmt: skip
        for band, colour in BAND_COLORS.items():
            assert pixels_near(image, band_shade(colour), tolerance=4) > 5000, band
