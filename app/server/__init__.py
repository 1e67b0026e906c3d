"""The engine process: `localchat serve` (see app/__init__.py)."""
