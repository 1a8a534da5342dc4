"""isolated_map(checkpoint=...): finished items kept in a file, skipped when the same call runs again.

Real forked workers write real files; each item leaves a marker file per run, so a test sees
which items really ran again. The kill-the-kernel case (a real ipykernel SIGKILLed) is in
test_map_resume_in_new_kernel.py.
"""

from __future__ import annotations

import os
import threading
import warnings

import pytest

from kerasmagic.isolation import IsolatedCellError, IsolationUsageError, IsolationWarning, isolated_map
from kerasmagic.isolation.checkpoint import MAGIC, Checkpoint, CheckpointError, _parse, fingerprint_call

pytestmark = pytest.mark.isolation


def square_and_mark(item):
    """Squares ``value``; leaves ``ran-<value>-<pid>`` in ``folder`` so that a test can count runs."""
    import os

    folder, value = item
    open(os.path.join(folder, f"ran-{value}-{os.getpid()}"), "w").close()
    return value * value


def cube_and_mark(item):
    import os

    folder, value = item
    open(os.path.join(folder, f"ran-{value}-{os.getpid()}"), "w").close()
    return value * value * value


def fail_on_two(item):
    folder, value = item
    square_and_mark(item)
    if value == 2:
        raise ValueError("item 2 is bad")
    return value


class ProcessBoundHandle:
    """Like a file handle or a database connection: it can be sent once, from the process that opened it."""

    def __init__(self) -> None:
        self.opened_in = os.getpid()

    def __getstate__(self):
        if self.opened_in != os.getpid():
            raise TypeError("a handle is tied to the process that opened it")
        return {"opened_in": self.opened_in}


def open_handle(item):
    return ProcessBoundHandle() if item == 1 else item


def _runs(folder) -> dict[int, int]:
    counts: dict[int, int] = {}
    for name in os.listdir(folder):
        if name.startswith("ran-"):
            value = int(name.split("-")[1])
            counts[value] = counts.get(value, 0) + 1
    return counts


def _items(folder, count=4):
    return [(str(folder), value) for value in range(count)]


def test_a_second_run_skips_the_finished_items_and_says_where_it_resumes(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = tmp_path / "cv.kmrun"
    first = isolated_map(fail_on_two, _items(runs), checkpoint=path, on_error="collect", progress=False)
    assert isinstance(first[2], IsolatedCellError) and first.failed == [2]
    # Three items ended ok and are kept; the failed one is recorded but runs again.
    assert _runs(runs) == {0: 1, 1: 1, 2: 1, 3: 1}
    capsys.readouterr()

    again = isolated_map(fail_on_two, _items(runs), checkpoint=path, on_error="collect", progress=False)
    out = capsys.readouterr().out
    assert "3 of 4 done, resuming at item 2" in out
    assert _runs(runs) == {0: 1, 1: 1, 2: 2, 3: 1}  # only the failed item ran again
    assert list(again)[:2] == [0, 1] and again[3] == 3
    assert again.restored == [True, True, False, True]
    assert "3 of them from" in str(again)


def test_everything_done_runs_nothing(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = tmp_path / "cv.kmrun"
    isolated_map(square_and_mark, _items(runs), checkpoint=path, progress=False)
    again = isolated_map(square_and_mark, _items(runs), checkpoint=path, progress=False)
    assert list(again) == [0, 1, 4, 9]
    assert _runs(runs) == {0: 1, 1: 1, 2: 1, 3: 1}
    assert "4 of 4 done" in capsys.readouterr().out
    frame = again.to_frame()
    assert list(frame["restored"]) == [True] * 4 and list(frame["status"]) == ["ok"] * 4
    assert (frame["rss_peak_bytes"] > 0).all()  # the report's summary came back from the file


def test_a_changed_function_is_refused_and_restart_discards(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = tmp_path / "cv.kmrun"
    isolated_map(square_and_mark, _items(runs), checkpoint=path, progress=False)
    before = path.read_bytes()
    with pytest.raises(CheckpointError) as info:
        isolated_map(cube_and_mark, _items(runs), checkpoint=path, progress=False)
    assert "written for a different function" in str(info.value)
    assert "resume='restart'" in str(info.value) and "4 finished item(s)" in str(info.value)
    assert path.read_bytes() == before and _runs(runs) == {0: 1, 1: 1, 2: 1, 3: 1}  # nothing ran, nothing changed

    cubes = isolated_map(cube_and_mark, _items(runs), checkpoint=path, resume="restart", progress=False)
    assert list(cubes) == [0, 1, 8, 27] and cubes.restored == [False] * 4


SCALE = 2


def scaled(x):
    return x * SCALE


def test_a_changed_global_the_function_uses_is_named(tmp_path, monkeypatch):
    path = tmp_path / "cv.kmrun"
    Checkpoint.open(str(path), fingerprint_call(scaled, [1, 2]), resume=True).close()
    Checkpoint.open(str(path), fingerprint_call(scaled, [1, 2]), resume=True).close()  # unchanged: accepted
    monkeypatch.setitem(scaled.__globals__, "SCALE", 3)
    with pytest.raises(CheckpointError, match="what it uses changed: SCALE"):
        Checkpoint.open(str(path), fingerprint_call(scaled, [1, 2]), resume=True)


def test_a_changed_item_list_is_refused_with_what_changed(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = tmp_path / "cv.kmrun"
    isolated_map(square_and_mark, _items(runs), checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match=r"different item list: 4 items then, 5 now"):
        isolated_map(square_and_mark, _items(runs, 5), checkpoint=path, progress=False)
    changed = _items(runs)
    changed[1] = (str(runs), 10)
    with pytest.raises(CheckpointError, match=r"different item list: item \[1\] differs"):
        isolated_map(square_and_mark, changed, checkpoint=path, progress=False)


@pytest.mark.parametrize("where", ["file-as-folder", "missing-folder", "folder"])
def test_a_checkpoint_that_cannot_be_written_fails_before_any_item_runs(tmp_path, where):
    runs = tmp_path / "runs"
    runs.mkdir()
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    path = {"file-as-folder": blocker / "cv.kmrun", "missing-folder": tmp_path / "no" / "such" / "cv.kmrun",
            "folder": runs}[where]
    with pytest.raises(CheckpointError) as info:
        isolated_map(square_and_mark, _items(runs), checkpoint=path, progress=False)
    assert ("cannot write the checkpoint" in str(info.value) and "nothing ran" in str(info.value)) or \
        "is a folder" in str(info.value)
    assert isinstance(info.value, IsolationUsageError)
    assert _runs(runs) == {}


@pytest.mark.parametrize("content, words", [
    (b'{"folds": [1, 2, 3]}', "a file of 20 bytes starting b'{\"folds\": [1, 2,' (JSON or text)"),
    (b"PK\x03\x04" + b"\x00" * 40, "(a zip file)"),
    (b"", None),  # an empty file is a new checkpoint: nothing to refuse
])
def test_a_foreign_file_is_refused_with_what_was_found(tmp_path, content, words):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = tmp_path / "cv.kmrun"
    path.write_bytes(content)
    if words is None:
        assert list(isolated_map(square_and_mark, _items(runs), checkpoint=path, progress=False)) == [0, 1, 4, 9]
        return
    with pytest.raises(CheckpointError) as info:
        isolated_map(square_and_mark, _items(runs), checkpoint=path, progress=False)
    assert "is not a kerasmagic map checkpoint" in str(info.value) and words in str(info.value)
    assert path.read_bytes() == content and _runs(runs) == {}


def test_restart_never_overwrites_a_file_that_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "results.json"
    path.write_bytes(b'{"fold_scores": [0.91, 0.9]}')
    with pytest.raises(CheckpointError, match="resume='restart' starts over in .* but it is not a kerasmagic map"):
        isolated_map(abs, [1, 2], checkpoint=path, resume="restart", progress=False)
    assert path.read_bytes() == b'{"fold_scores": [0.91, 0.9]}'


def test_a_damaged_record_refuses_the_whole_file_and_changes_nothing(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = tmp_path / "cv.kmrun"
    isolated_map(square_and_mark, _items(runs), checkpoint=path, progress=False)
    data = bytearray(path.read_bytes())
    _, records, _, _ = _parse(str(path), bytes(data))
    assert len(records) == 4
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside a record, as a bad disk or a stray write
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as info:
        isolated_map(square_and_mark, _items(runs), checkpoint=path, progress=False)
    message = str(info.value)
    assert "is damaged" in message and ("fails its checksum" in message or "not the start of a record" in message)
    assert "Nothing was read from it" in message
    assert path.read_bytes() == bytes(data) and _runs(runs) == {0: 1, 1: 1, 2: 1, 3: 1}


def test_a_record_cut_short_by_a_dying_kernel_is_dropped_and_its_item_runs_again(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = tmp_path / "cv.kmrun"
    isolated_map(square_and_mark, _items(runs), checkpoint=path, workers=1, progress=False)
    with open(path, "r+b") as handle:  # the last write() stopped half way
        handle.truncate(os.path.getsize(path) - 7)
    again = isolated_map(square_and_mark, _items(runs), checkpoint=path, workers=1, progress=False)
    assert list(again) == [0, 1, 4, 9] and again.restored == [True, True, True, False]
    assert any("cut short" in note for note in again.notes)
    assert _runs(runs) == {0: 1, 1: 1, 2: 1, 3: 2}
    assert path.read_bytes().startswith(MAGIC)
    assert len(_parse(str(path), path.read_bytes())[1]) == 4  # the torn record went, the new one is whole


def test_a_value_that_cannot_be_stored_is_said_when_it_comes_back(tmp_path):
    path = tmp_path / "cv.kmrun"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = isolated_map(open_handle, range(3), checkpoint=path, progress=False)
    assert isinstance(result[1], ProcessBoundHandle)  # the kernel has it
    said = [str(w.message) for w in caught if issubclass(w.category, IsolationWarning)]
    assert any("item [1]'s value (ProcessBoundHandle) cannot be stored" in text and
               "tied to the process that opened it" in text and "a resume runs this item again" in text
               for text in said), said
    with pytest.warns(IsolationWarning, match=r"item \[1\]'s value"):  # it ran again, and is said again
        again = isolated_map(open_handle, range(3), checkpoint=path, progress=False)
    assert again.restored == [True, False, True]


def lock_on_one(item):
    return threading.Lock() if item == 1 else item


def test_a_value_that_does_not_come_back_is_not_marked_done(tmp_path):
    # Issue 33, item 10: the worker could not send its value, the kernel got None, and the checkpoint
    # kept None as item [1]'s result: a resume returned it silently.
    path = tmp_path / "cv.kmrun"
    with pytest.warns(IsolationWarning, match=r"item \[1\]'s value did not come back .* not checkpointed"):
        isolated_map(lock_on_one, range(3), checkpoint=path, progress=False)
    with pytest.warns(IsolationWarning, match=r"item \[1\]'s value did not come back"):  # ran again
        again = isolated_map(lock_on_one, range(3), checkpoint=path, progress=False)
    assert again.restored == [True, False, True]


def hundred_kib(item):
    return bytes(100 * 1024)


def test_a_checkpoint_that_cannot_grow_is_said_and_stays_whole(tmp_path):
    import resource
    import signal

    path = tmp_path / "cv.kmrun"
    # A real limit the kernel enforces on this process's file writes, standing in for a full disk:
    # the third 100 KiB record does not fit (EFBIG instead of ENOSPC).
    saved_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    saved_signal = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (250 * 1024, saved_limit[1]))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = isolated_map(hundred_kib, range(4), workers=1, checkpoint=path, progress=False)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, saved_limit)
        signal.signal(signal.SIGXFSZ, saved_signal)
    assert [len(value) for value in result] == [102400] * 4  # the kernel has every value
    said = [str(w.message) for w in caught if issubclass(w.category, IsolationWarning)]
    assert any("item [2] could not be written to" in text and "a resume runs it again" in text for text in said), said
    _, records, _, torn = _parse(str(path), path.read_bytes())  # whole: no record cut short in the middle
    assert [record.index for record in records] == [0, 1] and not torn
    again = isolated_map(hundred_kib, range(4), workers=1, checkpoint=path, progress=False)
    assert again.restored == [True, True, False, False]


def test_to_frame_has_a_row_per_item_with_time_memory_attempts_and_status(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    result = isolated_map(fail_on_two, _items(runs), on_error="collect", progress=False)
    frame = result.to_frame()
    assert list(frame.columns) == ["item", "status", "attempts", "wall_s", "total_s", "rss_peak_bytes",
                                   "gpu_peak_bytes", "cause", "node", "restored"]
    assert list(frame["status"]) == ["ok", "ok", "error", "ok"]
    assert list(frame["attempts"]) == [1, 1, 1, 1]
    assert frame.loc[2, "cause"].startswith("raised ValueError: item 2 is bad")
    assert (frame["wall_s"] > 0).all() and (frame["rss_peak_bytes"] > 2**20).all()


def test_bad_resume_and_retry_options_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(IsolationUsageError, match="resume takes True"):
        isolated_map(abs, [1], checkpoint=tmp_path / "a.kmrun", resume="yes")
    with pytest.raises(IsolationUsageError, match="retries is how many more times"):
        isolated_map(abs, [1], retries=-1)
    with pytest.raises(IsolationUsageError, match="retry_on takes"):
        isolated_map(abs, [1], retries=1, retry_on=["sometimes"])
    assert not (tmp_path / "a.kmrun").exists()


NOTEBOOK = """
import functools
SCALE = 1000
def helper(x):
    return x * SCALE
def run(x):
    return helper(x)
def power(x, exponent):
    return x ** exponent
squared = functools.partial(power, exponent=2)
def run_partial(x):
    return squared(x)
class Model:
    def score(self, x):
        return x + 1
def run_class(x):
    return Model().score(x)
"""


@pytest.mark.parametrize("fn, change, named", [
    ("run", "SCALE = 3000", "helper"),  # a global only the helper reads
    ("run_partial", "squared = functools.partial(power, exponent=3)", "squared"),  # a partial's bound argument
    ("run_class", "class Model:\n    def score(self, x):\n        return x + 2", "Model"),  # a notebook class's method
])
def test_a_change_the_function_reaches_through_a_helper_partial_or_class_is_refused(tmp_path, fn, change, named):
    # Issue 33, item 8: truncate, change, rerun gave [0, 1, 2, 3000]: old and new results mixed.
    namespace: dict = {"__name__": "__main__"}
    exec(NOTEBOOK, namespace)  # noqa: S102 - a notebook's cells, as a kernel runs them
    path = tmp_path / "cv.kmrun"
    Checkpoint.open(str(path), fingerprint_call(namespace[fn], [1, 2]), resume=True).close()
    Checkpoint.open(str(path), fingerprint_call(namespace[fn], [1, 2]), resume=True).close()  # unchanged: accepted
    exec(change, namespace)  # noqa: S102
    with pytest.raises(CheckpointError, match=f"what it uses changed: {named}"):
        Checkpoint.open(str(path), fingerprint_call(namespace[fn], [1, 2]), resume=True)
