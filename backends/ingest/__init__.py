"""Ingestion: reading a corpus (which files are documents, in which format — Markdown, plain
text, reStructuredText, HTML's text view — every other file accounted for with its reason,
and the size limits), the corpus schema and its field values, and chunking text into
token-bounded chunks."""
