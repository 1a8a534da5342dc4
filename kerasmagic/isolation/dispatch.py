"""Where isolated jobs run, decided in one place, and running them there.

``run_isolated()``, ``%%fresh_model --isolate`` and ``isolated_map()`` prepare their jobs
(:class:`~kerasmagic.isolation.job.Job`, every value encoded) and hand them here: ``on`` (None
for this machine, an :class:`~kerasmagic.isolation.cluster.target.OnRay` for a Ray cluster)
picks the backend (:func:`backend_for`), and the one drive loop
(:func:`~kerasmagic.isolation.runner.drive`) runs them on it. Ray's driver is imported only for
``on=``; nothing else here decides between the two.

Example:
    >>> backend_for(None).not_started          # this machine's pool
    'interrupted before an isolated job started'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .job import Job
from .local import LocalBackend
from .pool import WorkerPool, default_pool
from .result import IsolatedResult
from .runner import Backend, JobRun, drive
from .spec import WorkerSpec

__all__ = ["Backend", "JobRun", "backend_for", "run_job", "run_jobs"]


def backend_for(on: Any = None, pool: WorkerPool | None = None) -> Backend:
    """The backend jobs run on: this machine's pool (``pool``, the default one), or the Ray
    cluster ``on`` names (an :class:`~kerasmagic.isolation.cluster.target.OnRay`, already checked)."""
    if on is None:
        return LocalBackend(pool if pool is not None else default_pool())
    # The Ray driver loads for on= only (and imports no Ray until it connects).
    from .cluster.remote import RayBackend  # noqa: PLC0415

    return RayBackend(on)


def run_jobs(runs: list[JobRun], backend: Backend, *, at_once: int = 1, stop_on_error: bool = True,
             on_change: Callable[[JobRun], None] | None = None) -> None:
    """Run ``runs`` on ``backend``, ``at_once`` at a time (see :func:`~kerasmagic.isolation.runner.drive`)."""
    __tracebackhide__ = True
    drive(runs, backend, at_once=at_once, stop_on_error=stop_on_error, on_change=on_change)


def run_job(job: Job, spec: WorkerSpec, result: IsolatedResult, *, timeout: float | None = None,
            forward_output: bool = True, pool: WorkerPool | None = None, on: Any = None) -> IsolatedResult:
    """Run one encoded job and fill ``result``; raises the isolation errors.

    ``on`` is a :class:`~kerasmagic.isolation.cluster.target.OnRay` to run it on a Ray
    cluster. The job folder is removed at the end, whatever happens.
    """
    __tracebackhide__ = True
    run = JobRun(job, spec, result, timeout=timeout, forward_output=forward_output)
    run_jobs([run], backend_for(on, pool))
    if run.error is not None:
        # Without its context: where it was found (our loop) is plumbing the user cannot act on.
        raise run.error from None
    return result
