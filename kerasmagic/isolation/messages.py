"""Every message isolation sends, one typed definition per kind, for its three channels.

- **the job channel** (:data:`JOB_CHANNEL`): a job's process and whoever drives it (the kernel,
  or a Ray node's agent), a ``socketpair`` wrapped in ``multiprocessing.connection.Connection``;
- **the template's control socket** (:data:`CONTROL_CHANNEL`): the kernel and a template
  process (``SOCK_SEQPACKET``; a ``fork`` request carries the job's descriptors beside it);
- **a Ray job's event stream** (:data:`EVENT_CHANNEL`): a node's agent and relay task to the
  kernel, in batches through Ray's object store.

On the wire a message is a plain dict, its ``kind`` first and its fields after it
(:meth:`Message.to_wire`), pickled on the two local channels: what docs/design/isolation.md lists.
A channel decodes only its own kinds, and says so for anything else, instead of guessing.
``sender`` is the pid of the process that sent a job-channel message: a process the job
forked shares the channel, and only the job's own messages count.

Example:
    >>> wire = Exited(pid=42, returncode=-9).to_wire()
    >>> wire
    {'kind': 'exited', 'pid': 42, 'returncode': -9}
    >>> CONTROL_CHANNEL.decode(wire)
    Exited(pid=42, returncode=-9)
    >>> JOB_CHANNEL.decode(wire)
    Traceback (most recent call last):
    ...
    kerasmagic.isolation.messages.UnknownMessage: the job channel does not carry 'exited' messages; it carries
    display, done, error, failed, job, ready, sample
"""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, cast

from ..records import wire_dict
from .job import SAMPLE_INTERVAL_S, Job, working_directory

__all__ = [
    "CHANNEL_LOST_EXIT", "CONTROL_CHANNEL", "EVENT_CHANNEL", "JOB_CHANNEL", "Accepted", "Channel", "Display", "Done",
    "Exited", "Final", "Fork", "Forked", "ImportFailed", "JobEnded", "Message", "MessageError", "NoAgent", "Output",
    "Placed", "Raised", "Ready", "Reap", "Refused", "Retire", "RunJob", "Sample", "UnknownMessage", "dumps",
]


class MessageError(ValueError):
    """Something arrived on a channel that is not one of its messages, as its definition has it."""


class UnknownMessage(MessageError):
    """A message whose ``kind`` the channel does not carry."""


@dataclass(kw_only=True)
class Message:
    """A message: its fields, and ``kind``, which names it on the wire."""

    kind: ClassVar[str] = ""
    #: The pid that sent it (job-channel messages from a job's process); left off the wire when None.
    sender: int | None = field(default=None, repr=False)

    def to_wire(self) -> dict[str, Any]:
        """The dict that travels: ``kind`` first, then the fields.

        Example:
            >>> Display(data={"text/plain": "1"}, metadata={}, sender=7).to_wire()
            {'kind': 'display', 'data': {'text/plain': '1'}, 'metadata': {}, 'sender': 7}
        """
        wire: dict[str, Any] = {"kind": self.kind}
        for item in fields(self):
            if item.name != "sender":
                wire[item.name] = getattr(self, item.name)
        if self.sender is not None:
            wire["sender"] = self.sender
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Message:
        """The message a :meth:`to_wire` dict describes; :class:`MessageError` names what is missing or extra."""
        known = {item.name for item in fields(cls)}
        extra = sorted(set(wire) - known - {"kind"})
        if extra:
            raise MessageError(f"the {cls.kind!r} message has no field {', '.join(map(repr, extra))}")
        try:
            return cls(**{key: value for key, value in wire.items() if key != "kind"})
        except TypeError as exc:  # a required field missing
            raise MessageError(f"the {cls.kind!r} message is incomplete: {exc}") from None


def dumps(message: Message) -> bytes:
    """What one of the local channels sends: the message's wire dict, pickled."""
    return pickle.dumps(message.to_wire(), protocol=5)


class Channel:
    """One of the three channels: the kinds it carries, and decoding what arrives on it."""

    def __init__(self, name: str, *kinds: type[Message]) -> None:
        self.name = name
        self.kinds = {kind.kind: kind for kind in kinds}

    def decode(self, wire: Any) -> Message:
        """The typed message for a wire dict; :class:`UnknownMessage` for a kind this channel does not carry."""
        kind = wire.get("kind") if isinstance(wire, dict) else None
        if not isinstance(kind, str):
            raise MessageError(f"the {self.name} carries dicts with a 'kind'; got {type(wire).__name__}")
        definition = self.kinds.get(kind)
        if definition is None:
            raise UnknownMessage(f"the {self.name} does not carry {kind!r} messages; it carries "
                                 f"{', '.join(sorted(self.kinds))}")
        return definition.from_wire(wire)

    def loads(self, data: bytes) -> Message:
        """Unpickle and decode what one of the local channels received."""
        return self.decode(pickle.loads(data))

    def __repr__(self) -> str:
        return f"Channel({self.name!r})"


# --- shared by channels ------------------------------------------------------------------


@dataclass(kw_only=True)
class Ready(Message):
    """A process is ready: a job's (job channel) or a template's, once it imported (control socket).

    ``modules``: the heavy modules it has imported (and those it was asked for); ``forked``: a
    job's process forked from a template; ``threads``: a template's threads after its imports;
    ``warm_up_s``: a warm spare's warm-up before it said ready (0.0: none).
    """

    kind: ClassVar[str] = "ready"
    pid: int
    rss_bytes: Any = None
    import_s: float | None = None
    modules: list[str] = field(default_factory=list)
    forked: bool = False
    threads: list[str] = field(default_factory=list)
    warm_up_s: float = 0.0


@dataclass(kw_only=True)
class ImportFailed(Message):
    """A process's imports failed (a fresh worker's or a template's): Python's exception and traceback."""

    kind: ClassVar[str] = "failed"
    error: str
    traceback: str = ""


@dataclass(kw_only=True)
class Sample(Message):
    """A memory sample of a job's process, in the sidebar's ``sample`` shape
    (:func:`kerasmagic.probes.sample.memory_sample`) with the ``pid`` and ``allocators``; its
    readings travel flat beside ``kind``, as they do to the sidebar.

    Example:
        >>> Sample(reading={"pid": 5, "rss_bytes": 10}).to_wire()
        {'kind': 'sample', 'pid': 5, 'rss_bytes': 10}
    """

    kind: ClassVar[str] = "sample"
    reading: dict[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        wire = {"kind": self.kind, **self.reading}
        if self.sender is not None:
            wire["sender"] = self.sender
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Sample:
        return cls(reading={key: value for key, value in wire.items() if key not in ("kind", "sender")},
                   sender=wire.get("sender"))


@dataclass(kw_only=True)
class Display(Message):
    """``display(obj)``, a figure, a cell's last value: a mimebundle and its metadata."""

    kind: ClassVar[str] = "display"
    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


# --- the job channel ------------------------------------------------------------------------


@dataclass(kw_only=True)
class RunJob(Message):
    """The job (kernel or agent → the job's process, once), with where it runs: the driver's
    working directory (None when it was deleted) and ``sys_path``; its fields travel flat."""

    kind: ClassVar[str] = "job"
    job: Job
    cwd: str | None = None
    sys_path: list[str] = field(default_factory=list)
    sample_interval_s: float = SAMPLE_INTERVAL_S

    @classmethod
    def here(cls, job: Job) -> RunJob:
        """The job as this process sends it: with its working directory and ``sys.path``.

        Example:
            >>> wire = RunJob.here(Job("code", "/tmp/job", code="x = 1")).to_wire()
            >>> wire["kind"], wire["code"], "owns_directory" in wire, "sys_path" in wire
            ('job', 'x = 1', False, True)
        """
        return cls(job=job, cwd=working_directory(), sys_path=[p for p in sys.path if p])

    def to_wire(self) -> dict[str, Any]:
        return {"kind": self.kind, **wire_dict(self.job, value=lambda value: value), "cwd": self.cwd,
                "sys_path": self.sys_path, "sample_interval_s": self.sample_interval_s}

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> RunJob:
        context = ("kind", "cwd", "sys_path", "sample_interval_s")
        try:
            job = Job(**{key: value for key, value in wire.items() if key not in context})
        except TypeError as exc:
            raise MessageError(f"a 'job' message does not describe a job: {exc}") from None
        return cls(job=job, cwd=wire.get("cwd"), sys_path=list(wire.get("sys_path") or []),
                   sample_interval_s=wire.get("sample_interval_s", SAMPLE_INTERVAL_S))


@dataclass(kw_only=True)
class JobEnded(Message):
    """What the last message of a job carries, whichever it is (:class:`Done`, :class:`Raised`):
    what did not come back, the run time, the final sample (with the exact peak RSS, PSS and
    USS), when the user's first line ran, and the heavy modules the job imported itself."""

    not_returned: dict[str, str] = field(default_factory=dict)
    run_s: float | None = None
    final_sample: dict[str, Any] = field(default_factory=dict)
    first_line_ts: float | None = None
    imported: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Done(JobEnded):
    """The job ran through: its encoded outputs (code) or value (a function)."""

    kind: ClassVar[str] = "done"
    outputs: dict[str, Any] = field(default_factory=dict)
    value: dict[str, Any] | None = None


@dataclass(kw_only=True)
class Raised(JobEnded):
    """The job raised: in rebuilding an input (``stage="inputs"``, ``name`` which) or in the user's code."""

    kind: ClassVar[str] = "error"
    stage: str
    exc_type: str
    exc_message: str
    traceback: str
    name: str | None = None


JOB_CHANNEL = Channel("job channel", Ready, ImportFailed, RunJob, Sample, Display, Done, Raised)
#: Exit status of a job's process that could not send its last message: the job closed the
#: channel's descriptor (``os.closerange``), so nothing it made can go back.
CHANNEL_LOST_EXIT = 74


# --- the template's control socket ----------------------------------------------------------


@dataclass(kw_only=True)
class Fork(Message):
    """Kernel → template: fork a child for a job; its channel, stdout and stderr travel beside it.

    ``warm``: a spare, forked before its job is known, which warms its Keras backend up before it
    says ready (:func:`kerasmagic.isolation.child.warmup.warm_up`); its ``directory`` is empty.
    """

    kind: ClassVar[str] = "fork"
    job_id: int
    env: dict[str, str]
    directory: str
    warm: bool = False


@dataclass(kw_only=True)
class Retire(Message):
    """Kernel → template: take no more jobs; exit once the running children end."""

    kind: ClassVar[str] = "retire"


@dataclass(kw_only=True)
class Reap(Message):
    """Kernel → template: the kernel is done with this child (its group ended): collect the zombie."""

    kind: ClassVar[str] = "reap"
    pid: int


@dataclass(kw_only=True)
class Forked(Message):
    """Template → kernel: the job's child runs as ``pid``."""

    kind: ClassVar[str] = "forked"
    job_id: int
    pid: int


@dataclass(kw_only=True)
class Refused(Message):
    """Template → kernel: no child for this job; ``retire``: the template may not fork any more."""

    kind: ClassVar[str] = "refused"
    job_id: int
    reason: str
    retire: bool = True


@dataclass(kw_only=True)
class Exited(Message):
    """Template → kernel: a child ended (the template is its parent, not the kernel); None: unknown."""

    kind: ClassVar[str] = "exited"
    pid: int
    returncode: int | None


CONTROL_CHANNEL = Channel("template's control socket", Fork, Retire, Reap, Ready, ImportFailed, Forked, Refused,
                          Exited)


# --- a Ray job's event stream -----------------------------------------------------------------


@dataclass(kw_only=True)
class Accepted(Message):
    """Agent → relay: the agent was alive when it took the job (the relay keeps it to itself)."""

    kind: ClassVar[str] = "accepted"


@dataclass(kw_only=True)
class Placed(Message):
    """Relay → kernel: the node Ray placed the job on, and the GPUs it gave the job."""

    kind: ClassVar[str] = "placed"
    node_id: str
    gpu_ids: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class NoAgent(Message):
    """Relay → kernel: the node has no agent of this kernel (it joined later, or it was dead)."""

    kind: ClassVar[str] = "no_agent"
    node_id: str
    dead_agent: bool = False


@dataclass(kw_only=True)
class Output(Message):
    """Agent → kernel: what the job printed, on ``stream`` (``stdout`` or ``stderr``)."""

    kind: ClassVar[str] = "output"
    stream: str
    text: str


@dataclass(kw_only=True)
class Final(Message):
    """Agent → kernel, last: the node's report and the job's error (both pickled: the error
    without its report), the job's :class:`Done` and the files its values live in, and the agent."""

    kind: ClassVar[str] = "final"
    result: bytes
    error: bytes | None = None
    done: Done | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        wire = super().to_wire()
        wire["done"] = None if self.done is None else self.done.to_wire()
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Final:
        done = wire.get("done")
        message = cast(Final, super().from_wire({**wire, "done": None}))
        if done is not None:
            decoded = JOB_CHANNEL.decode(done)
            if not isinstance(decoded, Done):
                raise MessageError(f"a 'final' message carries a 'done' message, not {decoded.kind!r}")
            message.done = decoded
        return message


EVENT_CHANNEL = Channel("Ray job's event stream", Accepted, Placed, NoAgent, Output, Display, Sample, Final)
