"""Request-local citation handles: a packet numbers its passages 1 to n, and `race cite`
resolves the numbers an answer uses through that packet and the corpus as it is now."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest

from race.cli.main import main
from race.cli.render import receipt_json
from race.engine import Engine
from race.evidence.cite import cite_answer, cited_handles, sentences
from race.evidence.packet import Packet, build_packet
from race.indexing.bundled import BUNDLED_CORPUS, SHOWCASE_PLAN
from race.receipt import Receipt
from rsc import InputError, canonical_pretty
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def showcase(session_engine: Engine) -> Receipt:
    return session_engine.run_sync(SHOWCASE_PLAN)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    copy = tmp_path / "corpus"
    shutil.copytree(BUNDLED_CORPUS, copy)
    return copy


def _lines(corpus: Path, path: str) -> list[str]:
    return (corpus / path).read_text(encoding="utf-8").splitlines(keepends=True)


def test_handles_are_contiguous_from_one_in_packet_order(showcase: Receipt, session_engine: Engine) -> None:
    gaps = session_engine.run_sync(FIXTURES / "plans" / "postfilter_heuristic.json")
    for receipt, chars in ((showcase, 2500), (showcase, 4000), (showcase, 20000), (gaps, 4000)):
        packet = session_engine.context(receipt, max_chars=chars)
        n = len(packet.passages)
        assert n >= 1
        assert [p.handle for p in packet.passages] == list(range(1, n + 1))
        assert [h.handle for h in packet.handles] == list(range(1, n + 1))
        for p, h in zip(packet.passages, packet.handles, strict=True):
            c = p.citation
            assert (h.passage, h.evidence, h.source_path, h.line_start, h.line_end, h.source_hash, h.chunk_id) == (
                p.id,
                p.evidence,
                c.source_path,
                c.line_start,
                c.line_end,
                c.source_hash,
                c.chunk_id,
            )
        # The text shows [n] before each passage, in the same order, and nowhere names a handle
        # it does not give.
        shown = [int(m) for m in re.findall(r"^### \[(\d+)\] ", packet.text, flags=re.MULTILINE)]
        assert shown == list(range(1, n + 1))
        for p in packet.passages:
            assert packet.text.index(f"### [{p.handle}] ") < packet.text.index(p.text)
        assert packet == build_packet(receipt, BUNDLED_CORPUS, max_chars=chars)


def test_the_same_inputs_give_the_same_packet_bytes(
    showcase: Receipt, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "receipt.json"
    saved.write_text(receipt_json(showcase))
    outputs = []
    for _ in range(2):
        assert main(["context", str(saved), "--max-chars", "4000", "--json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    packet = Packet.model_validate_json(outputs[0])
    assert packet.fingerprint.startswith("sha256:") and canonical_pretty(packet) + "\n" == outputs[0]
    # Another budget gives other passages, hence another fingerprint.
    assert build_packet(showcase, BUNDLED_CORPUS, max_chars=2500).fingerprint != packet.fingerprint


def test_valid_changed_and_unknown_handles_are_each_reported(
    showcase: Receipt,
    corpus: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    packet = Engine.context(showcase, corpus, max_chars=4000)
    assert len(packet.handles) >= 3
    unknown = len(packet.handles) + 4
    # Change one line inside handle 2's span, in the copy of the corpus.
    second = packet.handles[1]
    lines = _lines(corpus, second.source_path)
    lines[second.line_start] = "Nothing was fixed in any release.\n"
    (corpus / second.source_path).write_text("".join(lines), encoding="utf-8")
    answer = (
        "# Is Kestrel 3.4.2 safe?\n"
        "Some say TLS alone is enough [1]. Kestrel 3.4.2 fixes the bypass [2].\n"
        f"Idle connections once exhausted memory [3, {unknown}]. Upgrade soon.\n"
    )
    report = Engine.cite(packet, answer, corpus)
    status = {c.handle: c.status for c in report.handles}
    assert status == {1: "valid", 2: "changed", 3: "valid", unknown: "unknown_handle"}
    assert report.counts == {"valid": 2, "changed": 1, "missing": 0, "unknown_handle": 1}
    changed = next(c for c in report.handles if c.handle == 2)
    assert changed.evidence == second.evidence and changed.source_hash == "differs"
    assert "no longer hold the quoted text" in changed.detail
    assert next(c for c in report.handles if c.handle == unknown).detail == f"the packet gave handles 1-{unknown - 4}"
    assert [s.text for s in report.uncited] == ["# Is Kestrel 3.4.2 safe?", "Upgrade soon."]
    assert report.sentences == 5 and not report.holds

    # The command line: exit 3, the same report as JSON, and a line per handle as text.
    saved, written = tmp_path / "packet.json", tmp_path / "answer.txt"
    saved.write_text(canonical_pretty(packet) + "\n")
    written.write_text(answer)
    args = ["cite", str(saved), str(written), "--corpus", str(corpus)]
    assert main([*args, "--json"]) == 3
    assert json.loads(capsys.readouterr().out) == json.loads(canonical_pretty(report))
    assert main(args) == 3
    text = capsys.readouterr().out
    assert f"[2] changed        {second.source_path} lines {second.line_start}-{second.line_end}" in text
    assert f"[{unknown}] unknown_handle" in text and "uncited  line 3, sentence 5: Upgrade soon." in text
    # Only valid handles: exit 0; the answer may come on standard input.
    monkeypatch.setattr("sys.stdin", io.StringIO("TLS alone is enough [1]. Memory ran out [3].\n"))
    assert main([*args[:2], "-", *args[3:]]) == 0
    assert "2 handles cited: 2 valid, 0 changed, 0 missing, 0 unknown_handle" in capsys.readouterr().out


def test_a_moved_or_missing_source_does_not_hold(showcase: Receipt, corpus: Path) -> None:
    packet = build_packet(showcase, corpus, max_chars=4000)
    first, second = packet.handles[0], packet.handles[1]
    lines = _lines(corpus, first.source_path)
    (corpus / first.source_path).write_text("An inserted line.\n" + "".join(lines), encoding="utf-8")
    (corpus / second.source_path).unlink()
    report = cite_answer(packet, "TLS is enough [1]. It was fixed [2].", corpus)
    moved, gone = report.handles
    assert moved.status == "changed" and moved.detail.endswith(
        f"it is now at lines {first.line_start + 1}-{first.line_end + 1}"
    )
    assert gone.status == "missing" and gone.detail == "file not found" and gone.source_hash == "missing"
    # An edit outside the cited lines leaves the citation valid; the file's hash differs.
    lines[-1] = lines[-1] + "A new closing line.\n"
    (corpus / first.source_path).write_text("".join(lines), encoding="utf-8")
    again = cite_answer(packet, "TLS is enough [1].", corpus).handles[0]
    assert (again.status, again.source_hash) == ("valid", "differs")


def test_handles_and_sentences_are_read_as_written() -> None:
    assert cited_handles("a [3], then [3, 5] and [3][5]; code a[0] and [x] are not handles") == [3, 3, 5, 3, 5]
    found = sentences("Version 3.4.2 is fixed, e.g. by the patch [1]. [2]\nTLS is enough! Is it? [4]\n\n- a bullet\n")
    assert [(s.line, s.text, s.handles) for s in found] == [
        (1, "Version 3.4.2 is fixed, e.g. by the patch [1]. [2]", (1, 2)),
        (2, "TLS is enough!", ()),
        (2, "Is it? [4]", (4,)),
        (4, "- a bullet", ()),
    ]


def test_bad_input_is_one_line_and_exit_2(
    showcase: Receipt, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    packet = build_packet(showcase, BUNDLED_CORPUS, max_chars=4000)
    saved, answer = tmp_path / "packet.json", tmp_path / "answer.txt"
    saved.write_text(canonical_pretty(packet) + "\n")
    answer.write_text("TLS is enough [1].\n")
    receipt = tmp_path / "receipt.json"
    receipt.write_text(receipt_json(showcase))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    tampered = tmp_path / "tampered.json"
    data = json.loads(saved.read_text())
    data["handles"][0]["handle"], data["handles"][1]["handle"] = 2, 1
    tampered.write_text(json.dumps(data))
    edited = tmp_path / "edited.json"
    data = json.loads(saved.read_text())
    data["passages"][0]["evidence"] = data["handles"][0]["evidence"] = "chunk:another#0"
    edited.write_text(json.dumps(data))
    rehashed = tmp_path / "rehashed.json"
    data = json.loads(saved.read_text())
    data["handles"][0]["quoted_sha256"] = "sha256:" + "0" * 64
    rehashed.write_text(json.dumps(data))
    cases = {
        str(tmp_path / "absent.json"): "absent.json: cannot read",
        str(receipt): "receipt.json: not a context packet (race.packet/1",
        str(broken): "broken.json: malformed JSON",
        str(tampered): "tampered.json: handles: the packet's handles are not its passages numbered 1 to n",
        str(edited): "edited.json: fingerprint: the packet's content does not match its fingerprint",
        str(rehashed): "rehashed.json: fingerprint: the packet's content does not match its fingerprint",
    }
    for path, message in cases.items():
        assert main(["cite", path, str(answer)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert main(["cite", str(saved), str(tmp_path / "none.txt")]) == 2
    assert "none.txt: cannot read" in capsys.readouterr().err
    # An answer checked against another packet than the one it was written from is refused.
    other = build_packet(showcase, BUNDLED_CORPUS, max_chars=2500).fingerprint
    assert main(["cite", str(saved), str(answer), "--packet-fingerprint", other]) == 2
    err = capsys.readouterr().err
    assert err.startswith("race: error: --packet-fingerprint:") and packet.fingerprint in err and other in err
    assert main(["cite", str(saved), str(answer), "--packet-fingerprint", packet.fingerprint]) == 0
    with pytest.raises(InputError, match="not sha256:x"):
        Engine.cite(saved, answer, packet_fingerprint="sha256:x")


def test_no_handle_reaches_a_receipt_a_cache_or_a_retained_artifact(index_dir: Path, tmp_path: Path) -> None:
    cache, retained = tmp_path / "cache", tmp_path / "retained"
    with Engine.open(index_dir, cache_dir=cache) as engine:
        receipt = engine.run_sync(SHOWCASE_PLAN)
        kept = engine.run_sync(SHOWCASE_PLAN, retain=retained)

        def files() -> dict[Path, bytes]:
            return {p: p.read_bytes() for root in (cache, retained) for p in sorted(root.rglob("*")) if p.is_file()}

        before = files()
        assert any(p.is_relative_to(cache) for p in before) and any(p.is_relative_to(retained) for p in before)
        packet = engine.context(receipt, max_chars=20000)
        report = engine.cite(packet, "TLS is enough [1]. It was fixed [2]. Memory ran out [3].")
        assert report.holds and engine.run_sync(SHOWCASE_PLAN).fingerprints == receipt.fingerprints
        # Neither call wrote anything, and nothing written holds a handle or the packet.
        assert files() == before
    marks = (b'"handle', b"quoted_sha256", b"### [", packet.fingerprint.encode(), b"race.packet/", b"race.cite/")
    written = [*before.values(), receipt_json(receipt).encode(), receipt_json(kept).encode()]
    assert [m for m in marks for data in written if m in data] == []
