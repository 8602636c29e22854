"""A headless Chromium screenshot of an HTML file, and how much of it is chart."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

#: the critical-path red of the Gantt (orchestrator.reports.charts.CRITICAL)
CRITICAL_RGB = (0xD6, 0x27, 0x28)
#: a gate hold's span: #ff9f40 at alpha 0.25 on white (orchestrator.reports.charts_gates)
HOLD_RGB = (0xFF, 0xE7, 0xCF)


def band_shade(colour: str) -> tuple[int, int, int]:
    """A load-test band's shade: its ``#rrggbb`` at alpha 0.18 on white (charts._shade_bands)."""
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    r, g, b = (round(0.18 * v + 0.82 * 255) for v in rgb)
    return r, g, b


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:  # never a skip: the report's browser check must run
        pytest.fail("chromium not found (run `make test`: scripts/install-system-deps.sh)")
    return path


def screenshot(html: Path, png: Path, size: tuple[int, int] = (1100, 1600)) -> Image.Image:
    """Open ``html`` in headless Chromium and return the screenshot it writes to ``png``."""
    args = [
        chromium(),
        "--headless",
        "--no-sandbox",  # tests may run as root, where Chromium's sandbox refuses to start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={png.parent / 'chromium-profile'}",
        f"--window-size={size[0]},{size[1]}",
        f"--screenshot={png}",
        html.resolve().as_uri(),
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0 and png.exists(), f"chromium failed: {done.stderr[-2000:]}"
    return Image.open(png).convert("RGB")


def distinct_colours(image: Image.Image) -> int:
    colours = image.getcolors(maxcolors=image.width * image.height)
    assert colours is not None
    return len(colours)


def pixels_near(image: Image.Image, rgb: tuple[int, int, int], tolerance: int = 12) -> int:
    """How many pixels are within ``tolerance`` of ``rgb`` on every channel."""
    colours = image.getcolors(maxcolors=image.width * image.height)
    assert colours is not None
    return sum(
        count
        for count, colour in colours
        if all(abs(c - t) <= tolerance for c, t in zip(colour, rgb, strict=True))
    )
