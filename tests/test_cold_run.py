"""A cold `race run` of a lexical plan against the bundled index imports no vector, graph or
remote library and no corpus loader, and prints the bytes a warm in-process run prints; the
bundled index's stamp opens it while the corpus is unchanged and rebuilds it once it changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import race.indexing.bundled as bundled
import race.indexing.indexing as indexing
from race.cli.main import main
from tests.conftest import FIXTURES, roomy_plan

NOT_ON_THE_LEXICAL_PATH = (
    "networkx",
    "numpy",
    "lancedb",
    "pyarrow",
    "tokenizers",
    "safetensors",
    "httpx",
    "backends.ingest.corpus",
    "markdown_it",
    "yaml",
)

# Runs `race` in a fresh interpreter; prints its stdout and which of the named modules it imported.
_PROBE = """
import contextlib, io, json, sys
from race.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(json.loads(sys.argv[1]))
loaded = sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)
print(json.dumps({"code": code, "stdout": out.getvalue(), "imported": loaded}))
"""


@pytest.fixture(scope="module")
def cache(index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache dir holding the session's bundled index, checked once (which writes its stamp)."""
    folder = tmp_path_factory.mktemp("cache")
    shutil.copytree(index_dir, bundled.bundled_index_dir(folder))
    bundled.ensure_bundled_index(folder)
    assert bundled.stamp_path(bundled.bundled_index_dir(folder)).is_file()
    return folder


@pytest.fixture(scope="module")
def lexical_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "cascade_lexical.json"
    path.write_text(json.dumps(roomy_plan("cascade_lexical.json")))
    return path


@pytest.mark.parametrize("output", [[], ["--json"]], ids=["text", "json"])
def test_cold_lexical_run_imports_nothing_it_does_not_use_and_prints_the_warm_bytes(
    cache: Path,
    lexical_plan: Path,
    output: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = ["run", str(lexical_plan), "--index", "bundled", *output]
    env = {**os.environ, "RACE_CACHE_DIR": str(cache)}
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(NOT_ON_THE_LEXICAL_PATH)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env=env,
    )
    cold = json.loads(probe.stdout)
    assert cold["code"] == 0 and cold["imported"] == []
    assert "indexing the bundled fixture corpus" not in probe.stderr  # the stamp matched: no rebuild
    monkeypatch.setenv("RACE_CACHE_DIR", str(cache))
    capsys.readouterr()
    assert main(argv) == 0
    warm = capsys.readouterr().out
    assert "satisfied" in warm  # a receipt, not an empty answer
    if output:
        # JSON carries the run's timings (``operational``): the receipt itself is compared.
        assert _receipt_bytes(cold["stdout"]) == _receipt_bytes(warm)
    else:
        assert cold["stdout"] == warm


def _receipt_bytes(text: str) -> bytes:
    from race.receipt import Receipt

    return Receipt.model_validate_json(text).normalized_bytes()


def test_the_engine_class_keeps_the_packet_default_tokenizer() -> None:
    from race.evidence.packet import DEFAULT_TOKENIZER
    from race.evidence.tools import DEFAULT_TOKENIZER as ON_THE_ENGINE

    assert ON_THE_ENGINE == DEFAULT_TOKENIZER


def test_a_changed_corpus_file_rebuilds_the_bundled_index(
    index_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(FIXTURES / "corpus", corpus)
    cache = tmp_path / "cache"
    target = bundled.bundled_index_dir(cache)
    shutil.copytree(index_dir, target)
    _move_root(target, corpus)  # the copy's index names the copied corpus, as a build of it would
    monkeypatch.setattr(bundled, "BUNDLED_CORPUS", corpus)
    builds: list[Path] = []

    def build(corpus_path: Path, out: Path, **_: Any) -> None:
        builds.append(corpus_path)

    monkeypatch.setattr(indexing, "build_index", build)
    # No stamp yet: the index is checked against the corpus (the same content), and stamped.
    assert bundled.ensure_bundled_index(cache) == target and builds == []
    stamp = _stamp(target)
    assert stamp == bundled.corpus_stamp(corpus)
    # A matching stamp: opened without loading the corpus at all.
    monkeypatch.setattr("backends.load_corpus", lambda *a, **k: pytest.fail("the corpus was loaded"))
    assert bundled.ensure_bundled_index(cache) == target and builds == []
    monkeypatch.undo()
    monkeypatch.setattr(bundled, "BUNDLED_CORPUS", corpus)
    monkeypatch.setattr(indexing, "build_index", build)
    # One document changed: the stamp no longer matches, the corpus revision moved, so a rebuild.
    doc = sorted((corpus / "docs").rglob("*.md"))[0]
    doc.write_text(doc.read_text() + "\nOne more line.\n")
    assert bundled.corpus_stamp(corpus) != stamp
    assert bundled.ensure_bundled_index(cache) == target
    assert builds == [corpus]
    assert _stamp(target) == bundled.corpus_stamp(corpus)


def _move_root(target: Path, corpus: Path) -> None:
    manifest = target / indexing.MANIFEST
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "corpus_root": str(corpus.resolve())}, indent=1, sort_keys=True) + "\n")


def _stamp(target: Path) -> dict[str, str]:
    """The stamp without the manifest digest that ties it to the index it was written for."""
    recorded = json.loads(bundled.stamp_path(target).read_text())
    assert recorded.pop("manifest") == bundled._manifest_digest(target)
    return dict(recorded)


@pytest.fixture
def cached(index_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[Path]]:
    """A cache dir holding a copy of the session's bundled index, unstamped, and the list of
    corpora ``build_index`` is asked to build (it builds nothing)."""
    cache = tmp_path / "cache"
    target = bundled.bundled_index_dir(cache)
    shutil.copytree(index_dir, target)
    builds: list[Path] = []
    monkeypatch.setattr(indexing, "build_index", lambda corpus, out, **_: builds.append(corpus))
    return cache, target, builds


def test_the_stamp_follows_the_index_and_never_blesses_an_incomplete_one(
    cached: tuple[Path, Path, list[Path]],
) -> None:
    cache, target, builds = cached
    assert bundled.ensure_bundled_index(cache) == target and builds == []
    assert bundled.stamp_path(target).is_file()
    # The index was rebuilt since the stamp was written (by another version sharing the cache):
    # the stamp no longer vouches for it, and the index is checked again (here: still fresh).
    manifest = target / indexing.MANIFEST
    manifest.write_bytes(manifest.read_bytes() + b"\n")
    assert not bundled._stamp_matches(target, bundled.corpus_stamp(bundled.BUNDLED_CORPUS))
    assert bundled.ensure_bundled_index(cache) == target and builds == []
    assert bundled._stamp_matches(target, bundled.corpus_stamp(bundled.BUNDLED_CORPUS))
    # A build without the embedding model is lexical only: no stamp, so the next start checks
    # (and completes) it once the model is there.
    shutil.rmtree(target / "lancedb")
    bundled.stamp_path(target).unlink()
    assert bundled.ensure_bundled_index(cache) == target and builds == [bundled.BUNDLED_CORPUS]
    assert not bundled.stamp_path(target).exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("build_code", "sha256:" + "0" * 64), ("corpus_root", "/elsewhere/fixtures/corpus"), ("build_code", None)],
    ids=["other-code", "other-checkout", "before-provenance"],
)
def test_an_index_built_by_other_code_or_from_another_checkout_is_rebuilt(
    cached: tuple[Path, Path, list[Path]], field: str, value: str | None
) -> None:
    # A cache shared with another version or checkout: the index there holds that code's
    # contracts and facts, or names that checkout's files in every receipt. Stamped or not, it
    # is not reused.
    cache, target, builds = cached
    assert bundled.ensure_bundled_index(cache) == target and builds == []  # the session's own: stamped
    manifest = target / indexing.MANIFEST
    data = json.loads(manifest.read_text())
    data.pop(field) if value is None else data.update({field: value})
    manifest.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    assert bundled.ensure_bundled_index(cache) == target and builds == [bundled.BUNDLED_CORPUS]


def test_a_stamp_of_other_code_or_another_checkout_does_not_match(cached: tuple[Path, Path, list[Path]]) -> None:
    cache, target, _ = cached
    bundled.ensure_bundled_index(cache)
    stamp = bundled.corpus_stamp(bundled.BUNDLED_CORPUS)
    assert bundled._stamp_matches(target, stamp)
    assert not bundled._stamp_matches(target, {**stamp, "build_code": "sha256:" + "0" * 64})
    assert not bundled._stamp_matches(target, {**stamp, "corpus_root": "/elsewhere/fixtures/corpus"})


def test_a_stamp_that_cannot_be_written_costs_nothing_but_the_check(
    cached: tuple[Path, Path, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, target, builds = cached

    def read_only(*_: Any, **__: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(bundled.tempfile, "mkstemp", read_only)
    assert bundled.ensure_bundled_index(cache) == target and builds == []
    assert not bundled.stamp_path(target).exists()
