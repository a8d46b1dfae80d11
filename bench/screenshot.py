"""Screenshot of a saved run folder, browsed read-only as `cudaforge-tui --open RUN` shows it: the best
round selected, one pane open. No GPU and no API key: everything on screen is read from the run folder.

    python bench/screenshot.py examples/recorded/20261201-032158-softmax-1c92 docs/screenshot.svg [--pane 4]
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from cudaforge.tui.app import WorkbenchApp
from cudaforge.tui.cli import LaunchSpec
from textual.pilot import Pilot


async def save_best_round(app: WorkbenchApp, pilot: Pilot[int], svg: Path, pane: str, title: str) -> None:
    """Select the best round (else the latest), open `pane` (its key) and save the screen as `svg`."""
    app.selected = app.model.best_round or app.model.latest()
    app._refresh_all()
    await pilot.pause()
    await pilot.press(pane)
    app.query_one("#rounds").focus()  # no blinking text cursor in the picture
    await pilot.pause(0.5)
    svg.parent.mkdir(parents=True, exist_ok=True)
    svg.write_text(app.export_screenshot(title=title), encoding="utf-8")


async def shoot(run: Path, svg: Path, pane: str, size: tuple[int, int]) -> None:
    app = WorkbenchApp(LaunchSpec(open_run=str(run), use_user_config=False), system_stats=False, cwd=run.parent)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if not app.model.rounds:
            raise SystemExit(f"{run}: no rounds to show (is it a run folder?)")
        await save_best_round(app, pilot, svg, pane, f"cudaforge-tui --open {run.name}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a run folder")
    p.add_argument("svg", type=Path, help="where to save the SVG")
    p.add_argument("--pane", default="4", help="pane key (default 4 = NCU)")
    p.add_argument("--size", default="160x48", help="columns x rows (default 160x48)")
    args = p.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    asyncio.run(shoot(args.run, args.svg, args.pane, (cols, rows)))
    print(f"screenshot: {args.svg}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
