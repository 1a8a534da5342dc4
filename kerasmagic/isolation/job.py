"""``Job``: one isolated job as the kernel prepared it, every value already encoded.

It is built once (:func:`~kerasmagic.isolation.api.prepare_job`, a cell, each item of a map),
before any process is used: a value that cannot travel stops it here, and nothing runs
halfway. The job's process receives it as the ``job`` message
(:class:`~kerasmagic.isolation.messages.RunJob`); on a Ray cluster its fields travel to the
node's agent, which makes its own job of them.
"""

from __future__ import annotations

import os
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from ..records import NOT_WIRE
from .spare import fixed_settings_in_code

__all__ = ["SAMPLE_INTERVAL_S", "Job", "working_directory"]

#: How often a job's process sends a memory sample.
SAMPLE_INTERVAL_S = 0.25


def working_directory() -> str | None:
    """This process's working directory; None when it was deleted under it (the job's process
    keeps its own then, and the report says so).

    Example:
        >>> working_directory() == os.getcwd()
        True
    """
    try:
        return os.getcwd()
    except OSError:
        return None


@dataclass(eq=False, repr=False)
class Job:
    """Everything a worker needs, already encoded (so that nothing runs if a name cannot travel).

    The fields marked ``NOT_WIRE`` stay with the kernel (or a Ray node's agent); the others
    are the payload of the ``job`` message.

    Example:
        >>> job = Job("code", "/tmp/job-1", code="x = 1", outputs=["x"])
        >>> job.mode, job.outputs, job.owns_directory
        ('code', ['x'], True)
    """

    mode: str  # "code" or "function"
    _: KW_ONLY
    code: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    required_outputs: list[str] = field(default_factory=list)
    call: dict[str, Any] | None = None
    seed: int | None = None
    display_last: bool = False
    #: ``memory_limit=`` in bytes: the kernel (or a Ray node's agent) holds it, the worker never
    #: sees it; a field so that it travels to the node with the rest of the job.
    memory_limit_bytes: int | None = field(default=None, metadata=NOT_WIRE)
    directory: str = field(kw_only=False)  # positional, second: Job(mode, directory, ...); on the wire after the rest
    owns_directory: bool = field(default=True, metadata=NOT_WIRE)
    #: What the job sets that a warmed process can no longer change (``tf.config`` threads...): it
    #: never takes the pool's warm spare. Found in a code job's text here; a function job's caller
    #: fills it (:func:`~kerasmagic.isolation.spare.fixed_settings_in_function`).
    fixed_settings: list[str] = field(default_factory=list, metadata=NOT_WIRE)

    def __post_init__(self) -> None:
        if self.mode == "code" and not self.fixed_settings:
            self.fixed_settings = fixed_settings_in_code(self.code)
        # None is accepted for the containers, as "nothing".
        self.inputs = self.inputs or {}
        self.outputs = self.outputs or []
        self.required_outputs = self.required_outputs or []
        self.seed = None if self.seed is None else int(self.seed)  # Keras refuses numpy integers
