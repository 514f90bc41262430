"""A server that does not answer — named by `--remote` or as a race-remote instance of a
catalog — is bad input: one line naming the URL, exit status 2 (not 1, the internal-error
status), and nothing written."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from race.cli.main import EXIT_BAD_INPUT, main
from tests.conftest import FIXTURES

PLAN = FIXTURES / "plans" / "cascade_lexical.json"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_an_unreachable_remote_exits_2_naming_the_url(capsys: pytest.CaptureFixture[str], index_dir: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    code = main(["run", str(PLAN), "--index", str(index_dir), "--remote", url, "--remote-timeout", "2"])
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT == 2
    assert out == ""
    assert err.startswith(f"race: error: --remote: {url}: cannot reach the server: ")
    assert err.endswith("(is `race serve` running there?)\n") and err.count("\n") == 1


def test_an_unreachable_catalog_remote_exits_2_naming_instance_and_url(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    catalog = tmp_path / "remotes.toml"
    catalog.write_text(
        'schema_version = "race.catalog/1"\n'
        f'[instances.east]\nkind = "race-remote"\nlocation = "{url}"\ntimeout_s = 2.0\n'
    )
    code = main(["run", str(PLAN), "--catalog", str(catalog)])
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert err.startswith(f"race: error: {catalog}: instance east: {url}: cannot reach the server: ")
    assert err.count("\n") == 1
