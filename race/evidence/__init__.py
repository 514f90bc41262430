"""Evidence tools over receipts: context packets (and their text), citation verification, and
the reference documents generated from the documents' described JSON Schemas."""
