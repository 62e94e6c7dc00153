"""The engine every source runs on: the work a Spark job is given, its driver, and the continuous loop.

* :mod:`.wire`: one submission's work (a batch's plan or a continuous run) as one command-line
  argument, tagged with its source;
* :mod:`.driver`: the Spark job's driver: opens the work, builds the job's credentials, and runs the
  source's job (found in the registry by the work's source) with its output redacted;
* :mod:`.continuous`: batches back to back until a run's time is up, pausing when one found
  nothing new.
* :mod:`.leases`: the units a batch holds: taken, renewed with the worker's heartbeat while the
  batch runs, released whatever happens;
* :mod:`.sink`: what a destination gives the engine (:class:`~.sink.Sink`): the support objects'
  one owner plus its load method, append or merge;
* :mod:`.source`: what a source gives the engine (:class:`~.source.Source`): its units with their
  lineage, its positions as text, and a reader of one unit's range on an executor.
"""
