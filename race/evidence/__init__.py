"""Evidence tools over receipts: context packets (and their text), citation verification,
answers checked against pushed filters, and the generated schema references."""
