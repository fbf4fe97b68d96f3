"""Measurement on many hosts through Ray (the ``cluster`` extra: ``pip install autotune[cluster]``).

`autotune worker --address HEAD:6379` joins a Ray cluster and starts one measurement actor
per device of its host (`worker`, `actor`); `RayExecutor` spreads a job's batches over the
live actors of its target (`executor`, `dispatch`); `WorkerRegistry` finds them and keeps
their status (`registry`). Ray is imported only by the modules that need it.
"""
from __future__ import annotations

NAMESPACE = "autotune"          # Ray namespace of every autotune actor
ACTOR_PREFIX = "autotune-measure:"  # measurement actors are named ACTOR_PREFIX + worker id
