"""Ingestion: reading a corpus (its files and size limits), the corpus schema and its field
values, and chunking text into token-bounded chunks."""
