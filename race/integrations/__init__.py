"""RACE inside the retrieval frameworks users already run: a Haystack 2 retriever component
(``race.integrations.haystack``, ``pip install 'race-engine[haystack]'``) and a LlamaIndex
retriever (``race.integrations.llamaindex``, ``pip install 'race-engine[llamaindex]'``).

Each returns its framework's own document or node type, one per evidence item, with RACE's
custody, ranks, coverage and gaps in its metadata (``race.integrations.common``). This package
imports neither framework: only the module of the one asked for does.
"""
