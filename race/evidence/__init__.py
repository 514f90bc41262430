"""Evidence tools over receipts: context packets (and their text, each passage numbered by a
request-local citation handle), citation verification, an answer's handles checked against its
packet (``cite``), ``Engine.context`` and ``Engine.cite`` (``tools``), and the reference
documents generated from the documents' described JSON Schemas."""
