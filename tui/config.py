"""The terminal UI's config file, `tui.toml` in localchat's config dir:

    theme = "nord"

    [keymap]            # binding id = keys (comma-separated); the ids are listed on the help screen (F1)
    new_chat = "f5"
    stop = "escape,ctrl+c"
"""

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from localchat.app.paths import config_dir


def config_path() -> Path:
    return config_dir() / "tui.toml"


@dataclass
class TuiConfig:
    theme: str | None = None
    keymap: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> "TuiConfig":
        """The config at `path`; raises ValueError for a file that is not valid TOML of this shape."""
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            return cls()
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{path}: {error}") from None
        theme, keymap = data.get("theme"), data.get("keymap", {})
        if theme is not None and not isinstance(theme, str):
            raise ValueError(f"{path}: theme must be a string")
        if not isinstance(keymap, dict) or not all(isinstance(v, str) for v in keymap.values()):
            raise ValueError(f"{path}: [keymap] maps binding ids to key strings")
        return cls(theme=theme, keymap=keymap)

    def save(self, path: Path) -> None:
        lines = [] if self.theme is None else [f"theme = {json.dumps(self.theme)}", ""]
        if self.keymap:
            lines += ["[keymap]"] + [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in self.keymap.items()]
        path.write_text("\n".join(lines) + "\n")
