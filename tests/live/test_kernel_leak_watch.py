"""The leak watch in a real ipykernel through jupyter_client: cells keyed by the cell id that
JupyterLab sends in the execute request's metadata, and the ``cell_growth`` message."""

import time

import pytest

from kerasmagic.live.protocol import validate

pytestmark = pytest.mark.kernel

MIB = 2**20
LEAK = "leak.append(bytearray(2 * 2**20))"
NO_LEAK = "tmp = bytearray(2 * 2**20)\ndel tmp"


def execute(kernel, code: str, cell_id: str | None, timeout: float = 60.0) -> int:
    """Run a cell as JupyterLab does (``metadata.cellId``); return its execution count."""
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}
    metadata = {"cellId": cell_id, "deletedCells": [], "recordTiming": False} if cell_id else {}
    msg = kernel.client.session.msg("execute_request", content, metadata=metadata)
    kernel.client.shell_channel.send(msg)
    msg_id = msg["header"]["msg_id"]
    count = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = kernel._read(max(0.05, deadline - time.monotonic()))
        if got is None or got["parent_header"].get("msg_id") != msg_id:
            continue
        if got["msg_type"] == "execute_input":
            count = got["content"]["execution_count"]
        elif got["msg_type"] == "error":
            raise AssertionError("\n".join(got["content"]["traceback"]))
        elif got["msg_type"] == "status" and got["content"]["execution_state"] == "idle":
            return count
    raise TimeoutError(code)


def _open(kernel, version: str = "1.2.0") -> str:
    kernel.execute("%load_ext kerasmagic")
    comm_id = kernel.open_comm(data={"method": "open", "visible": True}, protocol_version=version)
    kernel.comm_data(comm_id, "hello")
    return comm_id


def test_cells_are_keyed_by_their_jupyterlab_cell_id_and_a_leak_is_flagged(kernel):
    comm_id = _open(kernel)
    first = kernel.comm_data(comm_id, "cell_growth")  # after hello, facts and sample
    validate(first, "to_frontend")
    assert first["cells"] == [] and first["watched_cells"] == 0  # the %load_ext cell is not recorded
    execute(kernel, "leak = []", "setup-cell")
    counts = [execute(kernel, LEAK, "leak-cell") for _ in range(4)]
    for _ in range(4):
        execute(kernel, NO_LEAK, "quiet-cell")
    # Each cell's run is followed by a cell_growth message (the sidebar is visible).
    messages = [m["content"]["data"] for m in kernel.comm_messages(comm_id)
                if m["content"]["data"]["method"] == "cell_growth"]
    assert len(messages) == 1 + 1 + 4 + 4, [m["watched_cells"] for m in messages]
    for message in messages:
        validate(message, "to_frontend")
    last = messages[-1]
    assert last["watched_cells"] == 3
    cells = {c["key"]: c for c in last["cells"]}
    assert set(cells) == {"setup-cell", "leak-cell", "quiet-cell"}  # the ids JupyterLab sent, not hashes
    leak = cells["leak-cell"]
    assert leak["cell_id"] == "leak-cell" and leak["flagged"] and leak["streak"] == 3
    assert leak["execution_count"] == counts[-1], (leak, counts)
    assert 1.8 * MIB <= leak["growth_per_run_bytes"] <= 2.6 * MIB, leak
    # The list it appends to holds the growth: the fix names it (in-process), not --isolate.
    assert (leak["fix"], leak["held_by"]) == ("delete", ["leak"]) and leak["first_line"] == LEAK, leak
    assert not cells["quiet-cell"]["flagged"] and cells["quiet-cell"]["runs"] == 4
    assert last["cells"][0]["key"] == "leak-cell"  # flagged first
    # The fourth message after the leak's first run is the first that flags it.
    assert [any(c["flagged"] for c in m["cells"]) for m in messages[2:6]] == [False, False, False, True]
    # The text report of the same kernel says the same.
    text = kernel.execute("import kerasmagic; print(kerasmagic.cell_growth())")
    assert f"cell [{counts[-1]}] grows 2.0" in text, text
    assert " MiB per run (3 runs). Fix: `leak` gains items on every run" in text, text


def test_without_a_cell_id_the_source_hash_is_the_key(kernel):
    comm_id = _open(kernel)
    execute(kernel, "a = 1", None)
    execute(kernel, "a = 1", None)
    message = kernel.comm_data(comm_id, "cell_growth")
    while message["watched_cells"] == 0 or message["cells"][0]["runs"] < 2:
        message = kernel.comm_data(comm_id, "cell_growth")
    cell = message["cells"][0]
    assert cell["key"].startswith("sha1:") and cell["cell_id"] is None and cell["runs"] == 2


def test_a_1_1_frontend_gets_no_cell_growth_and_refresh_sends_it_again(kernel):
    old = _open(kernel, "1.1.0")
    new = kernel.open_comm(data={"method": "open", "visible": True}, protocol_version="1.2.0")
    kernel.comm_data(new, "cell_growth")
    execute(kernel, "b = 2", "cell-b")
    kernel.comm_data(new, "cell_growth")
    kernel.send_comm(new, {"method": "refresh"})
    again = kernel.comm_data(new, "cell_growth")
    assert [c["key"] for c in again["cells"]] == ["cell-b"]
    kernel.send_comm(old, {"method": "refresh"})
    kernel.comm_data(old, "sample")
    kernel.execute("pass")
    assert "cell_growth" not in [m["content"]["data"]["method"] for m in kernel.comm_messages(old)]
