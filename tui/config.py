"""The terminal UI's config file, `tui.toml` in localchat's config dir:

    theme = "nord"

    [keymap]            # binding id = keys (comma-separated); the ids are listed on the help screen (F1)
    new_chat = "f5"
    stop = "escape,ctrl+c"

    [fork_presets]      # the fork dialog's (ctrl+g) presets: a name = one line per reply (its "Save these" writes them)
    "shorter / longer / as a list" = ["Shorter.", "Longer.", "As a list."]
"""

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from localchat.app.paths import config_dir


def config_path() -> Path:
    return config_dir() / "tui.toml"


# the fork dialog's presets until the user saves one of their own
DEFAULT_FORK_PRESETS = {"shorter / longer / as a list": ["Shorter.", "Longer.", "As a list."]}


@dataclass
class TuiConfig:
    theme: str | None = None
    keymap: dict[str, str] = field(default_factory=dict)
    fork_presets: dict[str, list[str]] = field(default_factory=lambda: dict(DEFAULT_FORK_PRESETS))

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
        presets = data.get("fork_presets", DEFAULT_FORK_PRESETS)
        if theme is not None and not isinstance(theme, str):
            raise ValueError(f"{path}: theme must be a string")
        if not isinstance(keymap, dict) or not all(isinstance(v, str) for v in keymap.values()):
            raise ValueError(f"{path}: [keymap] maps binding ids to key strings")
        if not isinstance(presets, dict) or not all(isinstance(v, list) and all(isinstance(line, str) for line in v)
                                                    for v in presets.values()):
            raise ValueError(f"{path}: [fork_presets] maps names to lists of lines")
        return cls(theme=theme, keymap=keymap, fork_presets=dict(presets))

    def save(self, path: Path) -> None:
        lines = [] if self.theme is None else [f"theme = {json.dumps(self.theme)}", ""]
        if self.keymap:
            lines += ["[keymap]"] + [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in self.keymap.items()] + [""]
        if self.fork_presets != DEFAULT_FORK_PRESETS:
            lines += ["[fork_presets]"] + [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in self.fork_presets.items()]
        path.write_text("\n".join(lines) + "\n")
