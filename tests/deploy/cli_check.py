"""Does a `sluice …` command line of a manifest parse with the real `sluice` CLI?

The subcommands' handlers are swapped for a recorder, so that parsing is all that
runs: a misspelt option fails here rather than in a crash-looping pod."""
from __future__ import annotations

import pytest

from control_plane import cli

HANDLERS = ("_api", "_controller", "_shipper", "_migrate", "_gateway", "_create_admin",
            "_agent", "_up", "_worker")


def parse(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> str:
    """The handler `argv` (without the leading "sluice") reaches; fails the test when
    the CLI refuses it."""
    reached = []
    for name in HANDLERS:
        monkeypatch.setattr(cli, name, lambda args, n=name: reached.append(n) or 0)
    try:
        assert cli.main(argv) == 0
    except SystemExit as exc:
        pytest.fail(f"`sluice {' '.join(argv)}` does not parse (exit {exc.code})")
    [handler] = reached
    return handler
