"""The command line (``race``): the entry point and commands (``race.cli.main``), the index,
inspect, evidence and serve commands, argument parsing, shell completion and rendering of
receipts."""
