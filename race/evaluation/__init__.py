"""Evaluation: query sets scored against judgments (streamed and resumable, measures, statistics,
reports, plots and TREC run files), and batches of plans run from a plans file, locally or on Ray
actors. Both run plans on the engine (a ``Runner`` or ``Evaluator``), so the engine sits above them
and delegates ``run_many`` and ``evaluate``."""
