"""Evaluation: query sets scored against judgments (measures, statistics, reports and
plots) and batches of plans run from a plans file, locally or on Ray."""
