"""Commands that need no backend start without importing one: `race --help`, `race rsc …`
and `race schema …` never load LanceDB, pyarrow, networkx, tantivy or the model's runtime; and
opening an index, running or planning a lexical plan never loads or hashes the embedding model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backends import LOCAL_ADAPTERS, Adapter, RemoteAdapter, shipped_contracts
from backends.models.embedding import EmbedderIdentity, MiniLMEmbedder
from backends.models.queries import BuiltWith
from rsc import IndexMissingError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

HEAVY = ("lancedb", "pyarrow", "networkx", "tantivy", "tokenizers", "safetensors")

# Runs one command in a fresh interpreter and prints which heavy modules it imported.
_PROBE = """
import contextlib, io, json, sys
from race.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(json.loads(sys.argv[1]))
    except SystemExit:
        pass
print(json.dumps(sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)))
"""


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["rsc", "list"], ["rsc", "show", "tantivy.bm25"], ["schema", "plan"]],
    ids=lambda a: " ".join(a),
)
def test_command_imports_no_backend(argv: list[str]) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(probe.stdout) == []


def test_shipped_contracts_are_the_adapters_own() -> None:
    adapters: tuple[type[Adapter], ...] = (*LOCAL_ADAPTERS, RemoteAdapter)
    from_adapters = sorted((c for a in adapters for c in a.contracts()), key=lambda c: (c.rsc_id, c.version))
    assert shipped_contracts(remote=True) == tuple(from_adapters)


# -- the model is loaded at the first vector use, never at Engine.open ---------------------------

# Opens an index, runs a lexical plan and `race plan` of it, then a vector plan; after each step
# it prints how often the model was loaded and which reads of its weight file were opened (an
# audit hook sees every open() of model.safetensors, including the sha256 pass).
_MODEL_PROBE = """
import contextlib, io, json, sys
from pathlib import Path
from typing import Any
reads = []
def audit(event, args):
    if event == "open" and args and str(args[0]).endswith("model.safetensors"):
        reads.append(str(args[0]))
sys.addaudithook(audit)
import backends.models.embedding as embedding
loads = []
_load_bert = embedding._load_bert
def traced(folder):
    loads.append(str(folder))
    return _load_bert(folder)
embedding._load_bert = traced
from race.cli.main import main
from race.engine import Engine
index_dir, lexical, vector = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
steps = {}
engine = Engine.open(index_dir)
steps["open"] = (len(loads), len(reads))
lexical_receipt = engine.run_sync(lexical)
steps["run lexical"] = (len(loads), len(reads))
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(["plan", str(lexical), "--index", str(index_dir)])
    except SystemExit as exit:
        assert not exit.code, exit.code
steps["race plan lexical"] = (len(loads), len(reads))
vector_receipt = engine.run_sync(vector)
steps["run vector"] = (len(loads), len(reads))
print(json.dumps({
    "steps": steps,
    "lexical": [e.key for e in lexical_receipt.evidence],
    "vector": [[h.chunk_id, h.custody.score] for e in vector_receipt.evidence for h in e.hits],
    "vector_gaps": [g.kind.value for g in vector_receipt.gaps],
}))
"""


def _vector_reference(index_dir: Path, query: str, doc_type: str, k: int) -> list[tuple[str, float]]:
    """The exact top k by cosine distance, from the LanceDB table's own rows and the model."""
    import lancedb
    import numpy as np

    from backends.lancedb.query import TABLE
    from backends.models.embedding import MiniLMEmbedder

    rows = lancedb.connect(str(index_dir / "lancedb")).open_table(TABLE).to_arrow().to_pydict()
    keep = [i for i, t in enumerate(rows["doc_type"]) if t == doc_type]
    vectors = np.asarray([rows["vector"][i] for i in keep], dtype=np.float64)
    q = MiniLMEmbedder().embed([query])[0].astype(np.float64)
    distance = 1.0 - vectors @ q / np.linalg.norm(vectors, axis=1) / np.linalg.norm(q)
    order = sorted(range(len(keep)), key=lambda j: (distance[j], rows["chunk_id"][keep[j]]))[:k]
    return [(rows["chunk_id"][keep[j]], float(distance[j])) for j in order]


LEXICAL = FIXTURES / "plans" / "cascade_lexical.json"
VECTOR = FIXTURES / "plans" / "exhaustive_vector.json"


def _probe(code: str, index_dir: Path) -> dict[str, Any]:
    """What ``code`` saw, run in a fresh interpreter over the index, a lexical and a vector plan."""
    probe = subprocess.run(
        [sys.executable, "-c", code, str(index_dir), str(LEXICAL), str(VECTOR)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stderr
    seen: dict[str, Any] = json.loads(probe.stdout)
    return seen


def test_lexical_plans_never_read_the_model(index_dir: Path) -> None:
    seen = _probe(_MODEL_PROBE, index_dir)
    # Opening the index, running a lexical plan and planning it: no load, no read of the weights.
    assert seen["steps"]["open"] == [0, 0]
    assert seen["steps"]["run lexical"] == [0, 0]
    assert seen["steps"]["race plan lexical"] == [0, 0]
    assert seen["lexical"], "the lexical plan found nothing"
    # The first vector leg loads the model once, hashes its weights, and answers exactly.
    loads, reads = seen["steps"]["run vector"]
    assert loads == 1 and reads >= 1
    assert seen["vector_gaps"] == []
    plan = json.loads(VECTOR.read_text(encoding="utf-8"))["obligations"][0]
    reference = _vector_reference(index_dir, plan["query"]["text"], "incident", plan["k"])
    assert [c for c, _ in seen["vector"]] == [c for c, _ in reference]
    assert [s for _, s in seen["vector"]] == pytest.approx([d for _, d in reference], abs=1e-5)


class _OtherWeights(MiniLMEmbedder):
    @property
    def identity(self) -> EmbedderIdentity:
        return EmbedderIdentity(name="other", dims=384, weights_sha256="sha256:" + "0" * 64)


def test_a_wrong_model_fails_the_vector_leg_clearly(index_dir: Path) -> None:
    from backends.lancedb import LanceAdapter
    from race.engine import Engine
    from rsc import GapKind

    built = Engine.open(index_dir)
    lance = LanceAdapter.open(index_dir, embedder=_OtherWeights())  # opens: nothing is embedded yet
    engine = Engine({**built.adapters, "lancedb": lance})
    lexical = engine.run_sync(FIXTURES / "plans" / "cascade_lexical.json")
    assert lexical.evidence and all(g.kind is GapKind.NOT_NEEDED for g in lexical.gaps)
    assert lexical.evidence == built.run_sync(FIXTURES / "plans" / "cascade_lexical.json").evidence
    receipt = engine.run_sync(FIXTURES / "plans" / "exhaustive_vector.json")
    assert not receipt.evidence
    [failure] = receipt.gaps
    assert failure.kind is GapKind.BACKEND_ERROR and failure.backend == "lancedb"
    assert "built with sentence-transformers/all-MiniLM-L6-v2" in failure.detail
    assert "embeds with other (sha256:0000" in failure.detail and "race index" in failure.detail
    with pytest.raises(IndexMissingError, match="rebuild") as raised:
        BuiltWith(_OtherWeights(), lance.embedder_identity, where="here", hint="rebuild").embed(["x"])
    assert str(raised.value).startswith("here: the vectors were built with") and "\n" not in str(raised.value)


def test_without_the_model_a_vector_index_still_answers_lexical_plans(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import backends.models.embedding
    from backends.models.embedding import INSTALL_HINT
    from race.engine import Engine
    from rsc import GapKind

    with_model = Engine.open(index_dir).run_sync(FIXTURES / "plans" / "cascade_lexical.json")
    monkeypatch.setattr(backends.models.embedding, "default_model_dir", lambda: None)
    engine = Engine.open(index_dir)  # opening needs no model any more
    assert engine.run_sync(FIXTURES / "plans" / "cascade_lexical.json").evidence == with_model.evidence
    receipt = engine.run_sync(FIXTURES / "plans" / "exhaustive_vector.json")
    [failure] = receipt.gaps
    assert failure.kind is GapKind.BACKEND_ERROR and failure.backend == "lancedb"
    assert "is not installed" in failure.detail and INSTALL_HINT in failure.detail


# -- planning a lexical plan, or running an exact vector leg, never opens the LanceDB table ----

# Runs `race plan` and `race run --json` of a lexical plan, then a vector plan, each with the
# modules of LanceDB and pyarrow looked up after it; prints what each step imported and the
# run's receipt, normalized, as canonical JSON.
_LANCE_PROBE = """
import contextlib, io, json, sys
from pathlib import Path
from typing import Any
from race.cli.main import main
from race.engine import Engine
from rsc.canonical import dumps_canonical
index_dir, lexical, vector = sys.argv[1], sys.argv[2], sys.argv[3]
loaded = lambda: sorted(m for m in ("lancedb", "pyarrow") if m in sys.modules)
steps = {}
for command in (["plan", lexical], ["run", lexical, "--json"]):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main([*command, "--index", index_dir])
        except SystemExit as exit:
            assert not exit.code, exit.code
    steps[command[0]] = loaded()
engine = Engine.open(Path(index_dir))
lexical_receipt = engine.run_sync(Path(lexical))
steps["engine run lexical"] = loaded()
vector_receipt = engine.run_sync(Path(vector))
steps["engine run vector"] = loaded()
print(json.dumps({
    "steps": steps,
    "lexical": dumps_canonical(lexical_receipt.normalized()).decode(),
    "vector": dumps_canonical(vector_receipt.normalized()).decode(),
}))
"""


def _with_the_table(index_dir: Path) -> Any:
    """An engine over ``index_dir`` whose LanceDB backend is the adapter over the table itself."""
    from backends.lancedb import LanceAdapter
    from race.engine import Engine

    opened = Engine.open(index_dir)
    return Engine({**opened.adapters, "lancedb": LanceAdapter.open(index_dir)})


def test_a_lexical_plan_plans_and_runs_without_lancedb(index_dir: Path) -> None:
    from rsc.canonical import dumps_canonical

    seen = _probe(_LANCE_PROBE, index_dir)
    assert seen["steps"] == {
        "plan": [],
        "run": [],
        "engine run lexical": [],
        # The exact vector leg reads the matrix files (pyarrow for the rows), never the table.
        "engine run vector": ["pyarrow"],
    }
    # The same receipts, byte for byte, as an engine that opened the table at once.
    reference = _with_the_table(index_dir)
    for name, plan in (("lexical", LEXICAL), ("vector", VECTOR)):
        assert seen[name] == dumps_canonical(reference.run_sync(plan).normalized()).decode(), name
    assert json.loads(seen["vector"])["evidence"]


def test_the_index_handle_answers_as_the_table_does(index_dir: Path, tmp_path: Path) -> None:
    """Generation, statistics, identity, contracts and calibrations read from the index's files
    are the adapter's own; after a commit the handle opens the table, and once the adapter has
    kept the new version's facts a fresh handle answers from files again."""
    import shutil

    import lancedb

    from backends.lancedb import LanceAdapter, LanceIndex
    from backends.lancedb.manifest import TABLE

    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)

    def same(handle: LanceIndex, real: LanceAdapter) -> None:
        assert handle.generation() == real.generation()
        assert handle.statistics().model_dump_json() == real.statistics().model_dump_json()
        assert handle.identity == real.identity and handle.models() == real.models()
        assert handle.index_contracts() == real.index_contracts()
        assert handle.calibrations() == real.calibrations()
        assert handle.corpus_schema == real.corpus_schema

    handle = LanceIndex.open(copy)
    same(handle, LanceAdapter.open(copy))
    assert handle._real is None, "the handle opened the table"
    before = handle.generation()

    table = lancedb.connect(str(copy / "lancedb")).open_table(TABLE)
    table.add(table.to_arrow().slice(0, 1))
    after = LanceAdapter.open(copy).generation()
    assert after != before and ":unindexed=1:" in after
    assert handle.generation() == after  # the kept facts are of the old version: the table is read
    assert handle._real is not None

    reader = LanceAdapter.open(copy)
    reader.statistics()  # reading its statistics, the adapter keeps the new version's facts
    fresh = LanceIndex.open(copy)
    same(fresh, reader)
    assert fresh._real is None and fresh.generation() == after
    assert fresh.statistics().rows == table.count_rows()


@pytest.mark.parametrize(
    "facts",
    [
        b"",
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"version": "seven"}',
        b'{"manifest": "0", "version": 1, "rows": 1, "indexed_rows": 1, "unindexed_rows": 0, "statistics": {}}',
    ],
    ids=["empty", "malformed", "not-utf8", "a-list", "fields-missing", "another-version"],
)
def test_a_damaged_facts_file_opens_the_table(index_dir: Path, tmp_path: Path, facts: bytes) -> None:
    """Whatever snapshot.json holds, the handle answers what the table does: facts that do not
    describe the latest version are not used, and the adapter writes them anew."""
    import shutil

    from backends.lancedb import LanceAdapter, LanceIndex
    from backends.lancedb.manifest import FACTS

    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    (copy / "lancedb" / FACTS).write_bytes(facts)
    handle = LanceIndex.open(copy)
    real = LanceAdapter.open(copy)
    assert handle.generation() == real.generation()
    assert handle.statistics() == real.statistics()
    assert (copy / "lancedb" / FACTS).read_bytes() == (index_dir / "lancedb" / FACTS).read_bytes()


def test_facts_with_statistics_of_another_shape_are_not_used(index_dir: Path, tmp_path: Path) -> None:
    import shutil

    from backends.lancedb import LanceAdapter, LanceIndex
    from backends.lancedb.manifest import FACTS

    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    path = copy / "lancedb" / FACTS
    facts = json.loads(path.read_bytes())
    path.write_text(json.dumps({**facts, "statistics": {"rows": -1}}), encoding="utf-8")
    handle = LanceIndex.open(copy)
    assert handle.statistics() == LanceAdapter.open(copy).statistics()


# -- `race --help` and every `race <command> --help` load no pydantic, httpx or backend ---------

LIBRARIES = (*HEAVY, "pydantic", "pydantic_core", "httpx", "orjson", "xxhash", "semantic_version", "numpy")

# Builds the parser in a fresh interpreter, lists its commands, then asks each for --help.
_HELP_PROBE = """
import contextlib, io, json, sys
from race.__main__ import main
argv = json.loads(sys.argv[1])
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "help": out.getvalue(),
                  "loaded": sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)}))
"""


def _help(argv: list[str]) -> dict[str, Any]:
    probe = subprocess.run(
        [sys.executable, "-c", _HELP_PROBE, json.dumps(argv), json.dumps(LIBRARIES)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    found: dict[str, Any] = json.loads(probe.stdout)
    return found


def _commands() -> list[str]:
    import argparse

    from race.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


def test_help_loads_no_library() -> None:
    top = _help(["--help"])
    assert top["code"] == 0 and "serve" in top["help"]
    assert top["loaded"] == []


@pytest.mark.parametrize("command", _commands())
def test_command_help_loads_no_library(command: str) -> None:
    found = _help([command, "--help"])
    assert found["code"] == 0 and f"race {command}" in found["help"]
    assert found["loaded"] == []


def test_a_usage_error_loads_no_library() -> None:
    # A bad argument is reported before anything a command needs is imported.
    found = _help(["run", "plan.json", "--deadline", "soon"])
    assert found["code"] == 2
    assert found["loaded"] == []
