"""Screenshots of the terminal UI for the README: the main screen with a short branched chat, from the fake engine
(fixed data), at 80x24 and 120x40, into docs/tui-80x24.svg and docs/tui-120x40.svg. Run by hand, not a test:

    .venv/bin/python tests/tui/screenshot.py
"""

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # fake_engine and tui_pilot, as the tests import them

from fake_engine import FakeEngine  # noqa: E402
from tui_pilot import SIZES, branched_chat  # noqa: E402

from localchat.tui.app import LocalChatApp  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs"


async def screenshot(size: tuple[int, int], config_folder: Path) -> Path:
    app = LocalChatApp(client=FakeEngine(), config_file=config_folder / "tui.toml")
    app.animation_level = "none"
    async with app.run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        screen.view.views[1].focus()  # the reply with a sibling: its switcher reads ‹ 2/2 ›, the footer its keys
        await pilot.pause(0.2)
        name = f"tui-{size[0]}x{size[1]}.svg"
        app.save_screenshot(name, path=str(DOCS))
        return DOCS / name


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        for size in SIZES:
            print(await screenshot(size, Path(folder)))


if __name__ == "__main__":
    asyncio.run(main())
