"""The run: executing one physical plan under its deadline.

The executor and its legs (every backend call, with faults and deadlines, and the screening of
each answer), the calls a run can leave behind and their bounded pool (``race.run.detached``),
the run cut short at its deadline (``race.run.deadline``), the run context, obligations and
their outcomes, the physical operators (``race.run.operators``, one module each), fusion,
early stop and the score-sum threshold algorithm, collapse of copies, freshness (staleness),
the roles a corpus gives its fields, and where a run's time went (``race.run.clock``)."""
