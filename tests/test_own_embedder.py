"""Bring your own embedding model: a folder in the sentence-transformers layout run on RACE's
encoder, several embedders in one engine, and query vectors from the caller.

The second model is ``tests/tiny_bert.py``'s: random weights from a fixed seed, 48 dimensions,
CLS pooling, a 64-token window and e5-style prompts, written into a temporary folder."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends.models.embedding import MiniLMEmbedder
from backends.models.folder import FolderEmbedder
from race.cli.main import main
from race.engine import Engine
from race.indexing.indexing import build_index
from race.receipt import Receipt
from rsc import EmbedderIdentity, GapKind, InputError
from tests.conftest import FIXTURES
from tests.tiny_bert import HIDDEN, MAX_SEQ, write_tiny_bert

MINILM_BITS = FIXTURES / "embeddings" / "minilm_bits.json"
TEXT = "replication lag after a network partition"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


@pytest.fixture(scope="module")
def tiny(tiny_folder: Path) -> FolderEmbedder:
    return FolderEmbedder(tiny_folder, name="tiny-bert")


@pytest.fixture(scope="module")
def tiny_corpus(tiny_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled corpus, its schema naming the tiny model's folder (relative to the schema)."""
    corpus = tmp_path_factory.mktemp("corpus") / "corpus"
    shutil.copytree(FIXTURES / "corpus", corpus)
    shutil.copytree(tiny_folder, corpus / "models" / "tiny-bert")
    schema = json.loads((corpus / "schema.json").read_text(encoding="utf-8"))
    schema["embedder"] = {"path": "models/tiny-bert", "name": "tiny-bert"}
    (corpus / "schema.json").write_text(json.dumps(schema), encoding="utf-8")
    return corpus


@pytest.fixture(scope="module")
def tiny_index(tiny_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-index") / "index"
    build_index(tiny_corpus, out)
    return out


def _catalog(folder: Path, instances: dict[str, Any]) -> Path:
    path = folder / "catalog.json"
    path.write_text(json.dumps({"schema_version": "race.catalog/1", "instances": instances}), encoding="utf-8")
    return path


@pytest.fixture
def two_models(index_dir: Path, tiny_index: Path, tmp_path: Path) -> Path:
    return _catalog(
        tmp_path,
        {
            "docs": {"kind": "tantivy", "location": str(index_dir)},
            "minilm": {"kind": "lancedb", "location": str(index_dir)},
            "tiny": {"kind": "lancedb", "location": str(tiny_index)},
        },
    )


def _obligation(oid: str, contract: str, **query: Any) -> dict[str, Any]:
    return {
        "id": oid,
        "kind": "seek_support",
        "query": {"text": TEXT, **query},
        "query_class": "conceptual",
        "k": 5,
        "mandatory": False,
        "allow_contracts": [contract],
    }


def _plan(*obligations: dict[str, Any]) -> dict[str, Any]:
    plan: dict[str, Any] = {"schema_version": "race.plan/1", "obligations": list(obligations)}
    if len(obligations) > 1:
        plan["operators"] = [{"id": "u", "op": "union", "inputs": [o["id"] for o in obligations]}]
        plan["root"] = "u"
    else:
        plan["root"] = obligations[0]["id"]
    return plan


def _by_id(receipt: Receipt) -> dict[str, Any]:
    return {o.id: o for o in receipt.obligations}


# -- the encoder ------------------------------------------------------------------------------


def test_minilm_vectors_are_bit_identical_to_those_recorded_before_folders() -> None:
    recorded = json.loads(MINILM_BITS.read_text(encoding="utf-8"))
    embedder = MiniLMEmbedder()
    assert embedder.identity.model_dump(mode="json") == recorded["identity"]
    got = embedder.embed(recorded["sentences"])
    for row, expected in zip(got, recorded["float32_le_base64"], strict=True):
        assert np.ascontiguousarray(row, dtype="<f4").tobytes() == base64.b64decode(expected)


def test_the_folder_is_written_deterministically(tiny_folder: Path, tmp_path: Path) -> None:
    again = write_tiny_bert(tmp_path / "again")
    files = sorted(p.relative_to(tiny_folder) for p in tiny_folder.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert all((tiny_folder / f).read_bytes() == (again / f).read_bytes() for f in files)
    assert FolderEmbedder(again, name="tiny-bert").identity == FolderEmbedder(tiny_folder, name="tiny-bert").identity


def _reference_forward(folder: Path, text: str) -> np.ndarray:
    """BERT in plain float64 numpy, written from the architecture alone: the reference the
    exact-sum encoder is measured against."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    config = json.loads((folder / "config.json").read_text())
    w = {k: v.astype(np.float64) for k, v in load_file(folder / "model.safetensors").items()}
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=MAX_SEQ)
    ids = np.asarray(tokenizer.encode(text).ids)

    def norm(x: np.ndarray, p: str) -> np.ndarray:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        eps = float(config["layer_norm_eps"])
        out: np.ndarray = (x - mean) / np.sqrt(var + eps) * w[f"{p}.weight"] + w[f"{p}.bias"]
        return out

    def dense(x: np.ndarray, p: str) -> np.ndarray:
        return x @ w[f"{p}.weight"].T + w[f"{p}.bias"]

    from math import erf

    gelu = np.vectorize(lambda v: 0.5 * v * (1.0 + erf(v / np.sqrt(2.0))))
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][: len(ids)]
    x = norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    heads = config["num_attention_heads"]
    size = config["hidden_size"] // heads
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q, k, v = (
            dense(x, f"{p}.attention.self.{n}").reshape(len(ids), heads, size) for n in ("query", "key", "value")
        )
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(size)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        context = np.einsum("hqk,khd->qhd", scores, v).reshape(len(ids), -1)
        x = norm(dense(context, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        x = norm(dense(gelu(dense(x, f"{p}.intermediate.dense")), f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    cls: np.ndarray = x[0] / np.linalg.norm(x[0])
    return cls


def test_folder_model_matches_a_float64_reference_with_its_pooling_and_prompts(
    tiny: FolderEmbedder, tiny_folder: Path
) -> None:
    import inspect

    texts = [TEXT, (inspect.getdoc(json) or "")[:2000]]  # the second is longer than the 64-token window
    documents, queries = tiny.embed(texts), tiny.embed_queries(texts)
    assert documents.shape == (2, HIDDEN) and documents.dtype == np.float32
    for i, text in enumerate(texts):
        assert np.abs(documents[i] - _reference_forward(tiny_folder, "passage: " + text)).max() < 1e-5
        assert np.abs(queries[i] - _reference_forward(tiny_folder, "query: " + text)).max() < 1e-5
    identity = tiny.identity
    assert (identity.name, identity.dims) == ("tiny-bert", HIDDEN)
    assert identity.config_sha256 is not None and identity.weights_sha256.startswith("sha256:")
    # A prefix stated explicitly changes the output, and so the identity.
    plain = FolderEmbedder(tiny_folder, name="tiny-bert", query_prompt="", document_prompt="")
    assert plain.identity.config_sha256 != identity.config_sha256
    assert plain.identity.weights_sha256 == identity.weights_sha256


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: shutil.rmtree(f), "embedder folder does not exist"),
        (lambda f: (f / "model.safetensors").unlink(), "lacks model.safetensors"),
        (
            lambda f: (f / "config.json").write_text(json.dumps({"model_type": "xlm-roberta", "hidden_act": "gelu"})),
            "model_type 'xlm-roberta'",
        ),
        (
            lambda f: (f / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True})),
            "pooling ['pooling_mode_max_tokens'] is not supported",
        ),
    ],
)
def test_a_folder_the_encoder_cannot_run_is_one_line(
    tiny_folder: Path, tmp_path: Path, change: Any, message: str
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(tiny_folder, folder)
    change(folder)
    with pytest.raises(InputError) as raised:
        FolderEmbedder(folder)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_race_index_with_a_missing_embedder_folder_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(FIXTURES / "corpus", corpus)
    schema = json.loads((corpus / "schema.json").read_text(encoding="utf-8"))
    schema["embedder"] = {"path": "models/absent"}
    (corpus / "schema.json").write_text(json.dumps(schema), encoding="utf-8")
    assert main(["index", str(corpus), "--out", str(tmp_path / "index")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "embedder.path" in err and "does not exist" in err
    assert not (tmp_path / "index").exists()


# -- an index built with it, beside a MiniLM index ----------------------------------------------


def test_the_index_is_chunked_and_embedded_by_its_own_model(
    tiny_index: Path, tiny_corpus: Path, index_dir: Path, tiny: FolderEmbedder
) -> None:
    import lancedb
    from tokenizers import Tokenizer

    from backends.ingest.corpus import Chunking, load_corpus
    from backends.lancedb.build import chunk_text

    manifest = json.loads((tiny_index / "lancedb" / "race.json").read_text(encoding="utf-8"))
    assert manifest["embedder"] == tiny.identity.model_dump(mode="json")
    assert manifest["embedder_source"]["document_prompt"] == "passage: "
    # The windows are the tiny model's 64 tokens ("passage: " and [CLS]/[SEP] included), not
    # MiniLM's 256: counted here with the folder's tokenizer itself.
    tokenizer = Tokenizer.from_file(str(tiny.settings.folder / "tokenizer.json"))
    tokenizer.no_truncation()
    chunks = load_corpus(tiny_corpus, chunking=Chunking(tokens=tiny.settings.token_counter())).chunks
    lengths = {c.chunk_id: len(tokenizer.encode("passage: " + chunk_text(c)).ids) for c in chunks}
    over = {cid: n - MAX_SEQ for cid, n in lengths.items() if n > MAX_SEQ}
    assert {cid: n for doc in manifest["truncated"].values() for cid, n in doc.items()} == over
    assert manifest["text_tokens"] == sum(lengths.values())
    assert len(over) < len(lengths) // 20  # only chunks whose title and heading alone fill the window
    tiny_rows = lancedb.connect(str(tiny_index / "lancedb")).open_table("chunks").count_rows()
    minilm_rows = lancedb.connect(str(index_dir / "lancedb")).open_table("chunks").count_rows()
    assert tiny_rows == len(chunks) > minilm_rows


def test_two_models_in_one_engine_each_leg_embeds_with_its_own(two_models: Path, tiny: FolderEmbedder) -> None:
    engine = Engine.from_catalog(two_models)
    models = [EmbedderIdentity.model_validate(m) for m in engine.models()]
    assert {(m.name, m.dims) for m in models} == {("sentence-transformers/all-MiniLM-L6-v2", 384), ("tiny-bert", 48)}
    plan = _plan(
        _obligation("m", "minilm.lancedb.exact_matrix"),
        _obligation("t", "tiny.lancedb.exact_matrix"),
    )
    receipt = engine.run_sync(plan)
    obligations = _by_id(receipt)
    assert obligations["m"].model_calls == 1 and obligations["t"].model_calls == 1
    assert obligations["m"].status.value == obligations["t"].status.value == "satisfied"
    # Identities in the receipt: MiniLM's as before, the folder model's with its config digest.
    data = json.loads(receipt.model_dump_json())
    assert tiny.identity.model_dump(mode="json") in data["models"]
    assert {"name": "sentence-transformers/all-MiniLM-L6-v2", "dims": 384} | {} in [
        {k: m[k] for k in ("name", "dims")} for m in data["models"]
    ]
    # Cosines of two models are not comparable: the union fuses by rank.
    assert {e.fusion.method for e in receipt.evidence} == {"rrf"}
    both = [e for e in receipt.evidence if set(e.obligations) == {"m", "t"}]
    assert all(len(e.fusion.ranks) == 2 for e in both)


def test_a_hybrid_over_both_vector_indexes_and_the_lexical_one(two_models: Path) -> None:
    engine = Engine.from_catalog(two_models)
    lexical = {**_obligation("l", "docs.tantivy.bm25"), "query_class": "lexical"}
    plan = _plan(
        lexical, _obligation("m", "minilm.lancedb.exact_matrix"), _obligation("t", "tiny.lancedb.exact_matrix")
    )
    receipt = engine.run_sync(plan)
    calls = {o.id: o.model_calls for o in receipt.obligations}
    assert calls == {"l": 0, "m": 1, "t": 1}
    assert receipt.evidence and {e.fusion.method for e in receipt.evidence} == {"rrf"}
    # The same inputs give the same bytes from an engine opened afresh.
    again = Engine.from_catalog(two_models).run_sync(plan)
    assert again.normalized_bytes() == receipt.normalized_bytes()


# -- caller vectors ---------------------------------------------------------------------------------


def test_a_caller_vector_of_the_right_embedder_is_used_without_a_model_call(
    two_models: Path, tiny: FolderEmbedder
) -> None:
    vector = [float(v) for v in tiny.embed_queries([TEXT])[0]]
    identity = tiny.identity.model_dump(mode="json")
    engine = Engine.from_catalog(two_models)
    with_vector = _plan(_obligation("t", "tiny.lancedb.exact_matrix", vector=vector, embedder=identity))
    given = engine.run_sync(with_vector)
    embedded = engine.run_sync(_plan(_obligation("t", "tiny.lancedb.exact_matrix")))
    from planner import render_text

    assert "tiny.lancedb.exact_matrix@1.0.0 mode=vector_exact_matrix" in (
        explained := render_text(engine.plan_sync(with_vector))
    )
    assert "model_calls=0" in explained and "model_calls=1" not in explained
    assert _by_id(given)["t"].model_calls == 0 and _by_id(embedded)["t"].model_calls == 1
    assert [e.key for e in given.evidence] == [e.key for e in embedded.evidence]
    assert [h.custody.score for e in given.evidence for h in e.hits] == [
        h.custody.score for e in embedded.evidence for h in e.hits
    ]


def test_a_caller_vector_of_another_embedder_is_refused_naming_both(
    two_models: Path, tiny: FolderEmbedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = Engine.from_catalog(two_models)
    stranger = tiny.identity.model_copy(update={"name": "BAAI/bge-small-en-v1.5"})
    vector = [float(v) for v in tiny.embed_queries([TEXT])[0]]
    plan = _plan(
        _obligation("t", "tiny.lancedb.exact_matrix", vector=vector, embedder=stranger.model_dump(mode="json"))
    )
    with pytest.raises(InputError) as raised:
        engine.run_sync(plan)
    message = str(raised.value)
    assert "obligation t" in message and "BAAI/bge-small-en-v1.5" in message and "tiny-bert" in message
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    assert main(["run", str(path), "--catalog", str(two_models)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    # An embedder the engine has, sent to a leg of the other one: that leg refuses it, naming both.
    minilm = MiniLMEmbedder()
    crossed = _plan(
        _obligation(
            "t",
            "tiny.lancedb.exact_matrix",
            vector=[float(v) for v in minilm.embed([TEXT])[0]],
            embedder=minilm.identity.model_dump(mode="json"),
        )
    )
    receipt = engine.run_sync(crossed)
    gaps = _by_id(receipt)["t"].gaps
    assert [g.kind for g in gaps] == [GapKind.BACKEND_ERROR]
    assert "all-MiniLM-L6-v2" in gaps[0].detail and "tiny-bert" in gaps[0].detail
    assert _by_id(receipt)["t"].model_calls == 0 and not receipt.evidence
