"""Tests for `localchat serve`'s settings: serve.toml in the config folder, then the flags."""

import pytest

from localchat.app.server.config import ServerConfig


@pytest.fixture
def settings_file(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    (tmp_path / "config").mkdir(mode=0o700)
    return tmp_path / "config" / "serve.toml"


def test_the_file_sets_what_no_flag_gives(settings_file) -> None:
    assert ServerConfig.from_env().speculative == "on"  # no file: the default
    settings_file.write_text('speculative = "off"\nkv_disk_gb = 2\n')
    config = ServerConfig.from_env()
    assert (config.speculative, config.kv_disk_gb) == ("off", 2)
    assert ServerConfig.from_env(speculative="on", kv_disk_gb=None).speculative == "on"  # a flag wins


@pytest.mark.parametrize(("text", "message"), [
    ('speculative = "maybe"\n', 'speculative must be "on" or "off"'),
    ("speculative = false\n", 'speculative must be "on" or "off"'),
    ("speculate = 1\n", "unknown setting speculate"),
    ("speculative = \n", "not valid TOML"),
])
def test_a_bad_file_is_a_clear_error(settings_file, text, message) -> None:
    settings_file.write_text(text)
    with pytest.raises(ValueError, match=message):
        ServerConfig.from_env()
