"""Evaluation: query sets scored against judgments (measures, statistics, reports and plots),
and batches of plans run from a plans file, locally or on Ray actors. Both run plans on a
``Runner`` (the engine), so the engine sits above them and delegates ``run_many`` and ``evaluate``."""
