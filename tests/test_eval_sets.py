"""The labelled query sets cite their passages: every quoted phrase stands in the lines its
judgment names, and every judged query is in the set."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES

SETS = {"tickets": FIXTURES / "corpus2", "kestrel": FIXTURES / "corpus"}


@pytest.mark.parametrize("name", sorted(SETS))
def test_every_judgment_quotes_its_cited_lines(name: str) -> None:
    folder = FIXTURES / "eval" / name
    queries = {json.loads(line)["id"] for line in (folder / "queries.jsonl").read_text().splitlines() if line}
    judgments = [json.loads(line) for line in (folder / "qrels.jsonl").read_text().splitlines() if line]
    assert judgments and {j["query"] for j in judgments} <= queries
    for judgment in judgments:
        for passage in judgment.get("passages", ()):
            lines = (SETS[name] / passage["path"]).read_text().splitlines()
            first, last = passage["lines"]
            assert passage["quote"] in "\n".join(lines[first - 1 : last]), (judgment["query"], passage)
