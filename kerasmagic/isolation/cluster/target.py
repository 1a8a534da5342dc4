"""What ``on="ray"`` means: which cluster, which resources per job, and connecting to it.

The cluster is the one the user chose: the one this process is already connected to
(``ray.init(...)`` done), else ``address=`` (``--address``), else ``RAY_ADDRESS``. No
cluster is ever started behind the user's back; ``on="ray-local"`` starts a local one for
trying things out, and says so.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import IsolationUsageError
from .session_watch import start_watcher

INSTALL_HINT = "install it with `pip install 'kerasmagic[ray]'` (or `pip install ray`) in this environment"
RAY_CLIENT_REFUSAL = (
    "on='ray' needs this notebook to be a driver inside the cluster, and a Ray Client address (ray://...) is not "
    "one: Ray Client cannot stream a job's output back (streaming generators). Run the notebook on the head node "
    "or in a pod of the cluster and connect with the GCS address (ray.init(address='HEAD:6379') or "
    "RAY_ADDRESS=HEAD:6379); see docs/guide/scale-out.md")
#: How long a cluster address may take to answer before we say it cannot be reached.
REACH_TIMEOUT_S = 5.0
#: How long a job that ``ray.shutdown()`` ended waits for that shutdown to finish (it takes about
#: 0.3 s on a 2-core machine) before its cell returns.
SHUTDOWN_WAIT_S = 30.0


@dataclass(frozen=True)
class OnRay:
    """Where and with what an isolated job runs on a Ray cluster (``on=OnRay(...)``).

    ``on="ray"`` is ``OnRay()``: one CPU per job, no GPU, wherever Ray places it.
    ``num_gpus`` GPUs are given by Ray and become the job's ``CUDA_VISIBLE_DEVICES``;
    ``memory`` (bytes) is Ray's logical memory resource; ``node`` pins jobs to one node
    (its node id, or its IP address).

    Example:
        >>> OnRay(num_gpus=1).task_options()
        {'num_cpus': 1.0, 'num_gpus': 1.0}
        >>> OnRay(num_cpus=0.5, memory=2 << 30).task_options()["memory"]
        2147483648
    """

    address: str | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory: int | None = None
    node: str | None = None
    local: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("num_cpus", "num_gpus"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise IsolationUsageError(f"{name} is a number of {name[4:].upper()}s per job (0, 0.5, 1, 2...), "
                                          f"got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.memory is not None and (isinstance(self.memory, bool) or not isinstance(self.memory, int)
                                        or self.memory <= 0):
            raise IsolationUsageError(f"memory is Ray's memory resource per job in bytes (e.g. 2 << 30 for 2 GiB), "
                                      f"got {self.memory!r}")
        for name in ("address", "node"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise IsolationUsageError(f"{name} takes a string, got {value!r}")

    def task_options(self) -> dict[str, Any]:
        """The relay task's resources: what Ray reserves for the job while it runs."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory is not None:
            options["memory"] = self.memory
        options.update(self.extra)
        return options


def resolve_on(on: Any, address: str | None = None) -> OnRay | None:
    """``None`` for a local job; the :class:`OnRay` that ``on`` (and ``address``) describe.

    Example:
        >>> resolve_on(None), resolve_on("local")
        (None, None)
        >>> resolve_on("ray", address="10.0.0.5:6379").address
        '10.0.0.5:6379'
        >>> resolve_on("cloud")
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: on= takes 'local', 'ray', 'ray-local' or
        kerasmagic.OnRay(...), got 'cloud'
    """
    if on is None or on == "local":
        if address is not None:
            raise IsolationUsageError("address= is the Ray cluster to run on: use it with on='ray'")
        return None
    if isinstance(on, OnRay):
        target = on
    elif on == "ray":
        target = OnRay()
    elif on == "ray-local":
        target = OnRay(local=True)
    else:
        raise IsolationUsageError(f"on= takes 'local', 'ray', 'ray-local' or kerasmagic.OnRay(...), got {on!r}")
    if address is not None:
        if target.local:
            raise IsolationUsageError("on='ray-local' starts a cluster here; address= connects to one: use one of them")
        target = OnRay(address=address, num_cpus=target.num_cpus, num_gpus=target.num_gpus, memory=target.memory,
                       node=target.node, extra=target.extra)
    return target


def import_ray() -> Any:
    """Ray, or a usage error that says how to install it."""
    try:
        import ray
    except ImportError:
        raise IsolationUsageError(f"on='ray' runs jobs on a Ray cluster, and Ray is not installed: {INSTALL_HINT}") \
            from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """Host and port of a GCS (``host:6379``) or client (``ray://host:10001``) address."""
    bare = address.split("://", 1)[-1].rstrip("/")
    host, _, port = bare.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


_WHAT_TO_DO = ("start one there (`ray start --head`), check the address (`ray status` on the head node prints it), "
               "or use on='ray-local' to try it on this machine")


class _LookupTimeout(TimeoutError):
    """The name lookup did not finish in time."""


def _resolve(host: str, port: int, timeout: float) -> list[tuple[Any, ...]]:
    """``getaddrinfo`` for a TCP connection, within ``timeout`` seconds (TimeoutError past it).

    The lookup itself takes no timeout (a DNS server that does not answer holds it for as
    long as the resolver's own retries last), so a name runs in a thread that is left behind.
    """
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass  # a name: looked up below
    else:
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)  # an IP address: no lookup
    found: dict[str, Any] = {}

    def look_up() -> None:
        try:
            found["infos"] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            found["error"] = exc

    lookup = threading.Thread(target=look_up, name="kerasmagic-ray-address-lookup", daemon=True)
    lookup.start()
    lookup.join(timeout)
    if lookup.is_alive():
        raise _LookupTimeout(host)
    if "error" in found:
        raise found["error"]
    return list(found["infos"])


def _connect_within(host: str, port: int, deadline: float) -> socket.socket:
    """A TCP connection to the first of ``host``'s addresses that takes one before ``deadline``.

    One deadline for the lookup and every address: ``socket.create_connection`` gives each
    address its own timeout after an unlimited lookup, so a name with several addresses where
    nothing answers held ``on="ray"`` for 5 s per address, and a dead DNS server for longer
    (issue 23, fault 4).
    """
    infos = _resolve(host, port, max(0.0, deadline - time.monotonic()))
    error: OSError = TimeoutError("timed out")
    for family, kind, proto, _, sockaddr in infos:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        candidate = socket.socket(family, kind, proto)
        candidate.settimeout(remaining)
        try:
            candidate.connect(sockaddr)
        except OSError as exc:
            candidate.close()
            error = exc
            continue
        return candidate
    raise error


def check_reachable(address: str, timeout: float = REACH_TIMEOUT_S) -> None:
    """Fail in seconds, naming the address, when nothing answers there (``ray.init`` would wait a minute).

    ``timeout`` covers the name lookup, every address the name has, and the head's answer:
    an address that blackholes connections (a firewall that drops them, a host that is
    down) fails after it, whatever the name resolves to.

    Example:
        >>> check_reachable("127.0.0.1:9", timeout=1)
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: no Ray cluster answers at 127.0.0.1:9
        (ConnectionRefusedError within 1 s); start one there (`ray start --head`), check the address
        (`ray status` on the head node prints it), or use on='ray-local' to try it on this machine
    """
    if address in ("auto", "local"):
        return  # Ray's own words: it looks them up itself, quickly
    where = _host_port(address)
    if where is None or "://" in address or not 0 < where[1] < 65536:
        # Ray's own refusals ("Invalid address format", "Unable to parse port number") came with
        # "check that this machine's Ray and Python match the cluster's", and port 99999 was
        # tried as a "connection refused" (issue 33: bad addresses get one clear line).
        raise IsolationUsageError(
            f"{address!r} is not a Ray cluster's address: give the head's GCS address as host:port (e.g. "
            "address='10.0.0.5:6379'; `ray status` on the head node prints it), or 'auto' on a machine of the "
            "cluster")
    deadline = time.monotonic() + timeout
    try:
        with _connect_within(*where, deadline) as connection:
            # A Ray head's GCS is a gRPC server: it answers HTTP/2's connection preface with a
            # SETTINGS frame at once. Any other server (a web server, a database, a port that
            # accepts and never speaks) left ray.init waiting for minutes (issue 23, fault 4).
            connection.settimeout(max(0.5, deadline - time.monotonic()))
            connection.sendall(_HTTP2_PREFACE + _EMPTY_SETTINGS_FRAME)
            answer = _read_up_to(connection, 9)
            if len(answer) == 9 and answer[3] != _SETTINGS_FRAME_TYPE:
                connection.settimeout(0.5)
                answer += _read_up_to(connection, 40)  # enough of it to recognise in the message
    except UnicodeError:  # the IDNA codec's word for "foo..bar": an empty or too long label
        raise IsolationUsageError(
            f"{where[0]!r} in {address!r} is not a valid host name; give the head's address as host:port "
            "(e.g. address='10.0.0.5:6379'; `ray status` on the head node prints it)") from None
    except OSError as exc:
        why = f"looking up {where[0]} took longer than {timeout:g} s" if isinstance(exc, _LookupTimeout) else \
            f"{type(exc).__name__} within {timeout:g} s"
        raise IsolationUsageError(f"no Ray cluster answers at {address} ({why}); {_WHAT_TO_DO}") from None
    if len(answer) < 9 or answer[3] != _SETTINGS_FRAME_TYPE:
        said = f"it answered {answer[:40]!r}" if answer else f"it said nothing within {timeout:g} s"
        raise IsolationUsageError(
            f"something listens at {address} but it is not a Ray cluster's head ({said}); give the head's GCS "
            "address (`ray status` on the head node prints it; 6379 by default), or use on='ray-local' to try it "
            "on this machine")
    # Any gRPC server answers the preface: a Ray Client server (port 10001, which wants ray://) or
    # another service left ray.init retrying for 300 s (issue 33, item 11). Ask for the GCS's own
    # method: only a Ray head's GCS has it.
    said = _gcs_answer(where, max(0.5, deadline - time.monotonic()))
    if said:
        raise IsolationUsageError(
            f"a gRPC server listens at {address} but it is not a Ray cluster's head ({said}); give the head's GCS "
            "address (`ray status` on the head node prints it; 6379 by default; a Ray Client port such as 10001 "
            "takes ray://, which on='ray' does not use), or use on='ray-local' to try it on this machine")


_GCS_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"  # Ray 2.8+; an empty request is a valid one


def _gcs_answer(where: tuple[str, int], timeout: float) -> str:
    """Why the gRPC server at ``where`` is not a Ray GCS, in words; "" where it is one, or where
    this cannot be asked (no grpc module: Ray brings it, so that is no Ray either way)."""
    try:
        import grpc  # type: ignore[import-untyped,unused-ignore]  # noqa: PLC0415 - Ray's dependency, loaded only to check an address
    except ImportError:
        return ""
    host, port = where
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    channel = grpc.insecure_channel(target)
    try:
        call = channel.unary_unary(_GCS_METHOD, request_serializer=lambda request: request,
                                   response_deserializer=lambda data: data)
        call(b"", timeout=timeout)
        return ""
    except grpc.RpcError as exc:
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return "it has no Ray GCS service"
        if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
            return f"it did not answer a GCS request within {timeout:.0f} s ({code.name})"
        return ""  # an answer from a GCS that refuses us (authentication, a newer Ray): ray.init says why
    finally:
        channel.close()


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_EMPTY_SETTINGS_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # length 0, type SETTINGS, stream 0
_SETTINGS_FRAME_TYPE = 0x04


def _read_up_to(connection: socket.socket, count: int) -> bytes:
    """Up to ``count`` bytes, fewer where the peer closes or the timeout passes first."""
    data = b""
    try:
        while len(data) < count:
            chunk = connection.recv(count - len(data))
            if not chunk:
                break
            data += chunk
    except (TimeoutError, ConnectionError):
        pass
    return data


def connect(target: OnRay) -> str:
    """Make sure this process is connected to the target's cluster; a note for the report.

    Raises:
        IsolationUsageError: Ray missing, no cluster chosen, or none answering there.
    """
    ray = import_ray()
    client = getattr(getattr(ray.util, "client", None), "ray", None)
    if (target.address or os.environ.get("RAY_ADDRESS") or "").startswith("ray://") or (
            client is not None and ray.is_initialized() and client.is_connected()):
        raise IsolationUsageError(RAY_CLIENT_REFUSAL)
    if ray.is_initialized():
        wanted = target.address
        if wanted and wanted not in ("auto",) and not _same_cluster(ray, wanted):
            raise IsolationUsageError(
                f"this process is already connected to a Ray cluster, not to {wanted}: call ray.shutdown() first "
                "to use another one, or leave address= out to use the connected one")
        return ""
    if target.local:
        cpus = max(1, os.cpu_count() or 1)
        # address="local": a new cluster, never one another process started on this machine.
        context = ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
                           logging_level="ERROR")
        # Ray ends the cluster at a clean exit only: a watcher ends it when this process is
        # killed, or its dashboard and runtime-env agents run on (issue 23, fault 5).
        start_watcher(_session_dir(ray, context))
        return (f"started a local Ray cluster on this machine ({cpus} CPUs) because on='ray-local' asked for it; "
                "it ends with this process (ray.shutdown() ends it now)")
    address = target.address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise IsolationUsageError(
            "on='ray' runs on the Ray cluster you choose, and none is chosen: call ray.init(address=...) first, "
            "set RAY_ADDRESS, or pass address= (--address in the magic); on='ray-local' starts a local one to try it")
    check_reachable(address)
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise IsolationUsageError(f"could not connect to the Ray cluster at {address}: {exc}. Check the address "
                                  "and that this machine's Ray and Python match the cluster's") from None
    return ""


def wait_for_shutdown(ray: Any, within_s: float = SHUTDOWN_WAIT_S) -> bool:
    """Wait until a ``ray.shutdown()`` under way in another thread has finished; False if it has
    not within ``within_s`` (True at once where none is under way, or Ray is connected again).

    Ray's shutdown first marks the process disconnected (``ray.is_initialized()`` turns False),
    then ends the core worker and only at its end drops its node object. A job it ended used to
    return its cell in between, and the user's next ``ray.init`` then had its fresh node dropped by
    the finishing shutdown: ``AttributeError: 'NoneType' object has no attribute 'address_info'``,
    and a process Ray calls connected with no node (issue 33, item 11). Ray says nothing public
    about a shutdown in progress: its worker module's ``global_worker.mode`` (None once done) and
    ``_global_node`` are read, and where this Ray has neither, nothing is waited for.

    Example:
        >>> import types
        >>> done = types.SimpleNamespace(is_initialized=lambda: False, _private=types.SimpleNamespace(
        ...     worker=types.SimpleNamespace(global_worker=types.SimpleNamespace(mode=None), _global_node=None)))
        >>> wait_for_shutdown(done)
        True
    """
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if worker is None:
        return True
    deadline = time.monotonic() + within_s
    while getattr(getattr(worker, "global_worker", None), "mode", None) is not None \
            or getattr(worker, "_global_node", None) is not None:
        if ray.is_initialized():
            return True  # connected again (another thread's ray.init): no shutdown is under way
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _session_dir(ray: Any, context: Any) -> str:
    """The folder of the Ray session ``ray.init`` just started ("" where this Ray does not say)."""
    try:
        return str(context.address_info["session_dir"])
    except Exception:  # noqa: BLE001 - an older or newer Ray: ask the node instead
        try:
            return str(ray._private.worker._global_node.get_session_dir_path())
        except Exception:  # noqa: BLE001 - no watcher then; a clean exit still ends the cluster
            return ""


def _same_cluster(ray: Any, address: str) -> bool:
    try:
        current = ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001 - a client connection has no GCS address to compare
        return True
    wanted = _host_port(address)
    have = _host_port(current or "")
    if wanted is None or have is None:
        return True
    same_host = wanted[0] == have[0] or {wanted[0], have[0]} <= {"127.0.0.1", "localhost", _own_ip()}
    return same_host and wanted[1] == have[1]


def _own_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def ray_is_imported() -> bool:
    """Whether this process has imported Ray (``import kerasmagic`` never does)."""
    return "ray" in sys.modules
