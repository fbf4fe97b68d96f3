"""The one place that decides where a target's kernels are measured: on this host
(`LocalExecutor`) or on a Ray cluster's workers (`RayExecutor`). The library's `tune`, the
model tuner, the CLI and the service all make their executors here."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from autotune.measure import LocalExecutor
from autotune.measure.options import MeasureOptions

if TYPE_CHECKING:
    from autotune.measure.executor import Executor
    from autotune.target import Target


def make_executor(target: "Target", options: MeasureOptions, *,
                  ray_address: Optional[str] = None, registry: Any = None) -> "Executor":
    """An executor of ``target`` measuring with ``options``: on the Ray cluster when a
    ``registry`` (a `WorkerRegistry` shared by many executors) or a ``ray_address`` is
    given, else on this host. Ray is imported only then (the ``cluster`` extra)."""
    if registry is None and not ray_address:
        return LocalExecutor(target, options=options)
    try:
        from autotune.cluster.executor import RayExecutor
    except ImportError as exc:
        raise ImportError(f"measuring on the Ray cluster at {ray_address or 'the registry'} "
                          f"needs pip install 'autotune[cluster]' ({exc})") from exc
    if registry is not None:
        return RayExecutor(target, registry=registry, options=options)
    return RayExecutor(target, address=ray_address, options=options)
