"""Takes the README's screenshot of the dashboard (docs/dashboard.png) from a real run: the demo with
``--web``, opened in Debian's headless chromium through Playwright, a few seconds into the run.

    .venv/bin/python scripts/dashboard_screenshot.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "subagent_tracker",
            "demo",
            "--web",
            "--plain",
            "--speed",
            "0.5",
            "--linger",
            "5",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stdout is not None
        address = ""
        while not address:
            line = demo.stdout.readline()
            if not line:
                raise SystemExit("the demo ended before it printed the dashboard's address")
            if line.startswith("dashboard: "):
                address = line.split()[1]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 760}, device_scale_factor=1)
            page.goto(address)
            # Far enough in that the scenario has cancelled a subtree and the chart has points.
            time.sleep(14)
            page.screenshot(path=ROOT / "docs" / "dashboard.png")
            browser.close()
    finally:
        demo.terminate()
        demo.wait(30)
    print("wrote docs/dashboard.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
