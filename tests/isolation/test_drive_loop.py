"""The drive loop and JobRun, driven against scripted fake processes: every way a job ends, in
milliseconds and without forking (the fake sits at the process edge only: tests/isolation/scripted_process.py).

The real-process suites (test_fork, test_errors, test_lifecycle...) check the same endings
with real workers; these check the loop's own decisions quickly, so a change to it needs the
slow suite only at the end.
"""

from __future__ import annotations

import logging
import os
import time
import types
import warnings

import pytest

from kerasmagic import events
from kerasmagic.isolation import (
    IsolatedCellError,
    IsolatedCrash,
    IsolatedInterrupt,
    IsolatedOutOfMemory,
    IsolatedShippingError,
    IsolatedTimeout,
    IsolationUsageError,
    IsolationWarning,
)
from kerasmagic.isolation.dispatch import run_job
from kerasmagic.isolation.job import Job
from kerasmagic.isolation.local import LocalBackend
from kerasmagic.isolation.messages import Done
from kerasmagic.isolation.result import IsolatedResult
from kerasmagic.isolation.runner import JobRun, drive
from kerasmagic.isolation.shipping import encode
from kerasmagic.isolation.sink import CellSink
from kerasmagic.isolation.spec import WorkerSpec
from kerasmagic.isolation.template import TemplateFailed

from scripted_process import (
    ScriptedPool,
    close_channel,
    done,
    exit_with,
    expect_job,
    grow_to,
    hang,
    import_failed,
    interrupt,
    pause,
    raised,
    ready,
    sample,
    say,
    send,
    send_raw,
)

pytestmark = pytest.mark.unit

SPEC = WorkerSpec(("numpy",), ())
MiB = 1 << 20


@pytest.fixture
def folder(tmp_path):
    """A fresh job folder per call (the loop removes it when the job ends)."""
    counter = iter(range(1000))

    def make() -> str:
        path = tmp_path / f"job-{next(counter)}"
        path.mkdir()
        return str(path)

    return make


def run_one(pool, folder, *, timeout=None, memory_limit_bytes=None, forward_output=True):
    job = Job("function", folder(), memory_limit_bytes=memory_limit_bytes)
    result = IsolatedResult("a scripted job")
    return run_job(job, SPEC, result, timeout=timeout, forward_output=forward_output, pool=pool), job


def failing(pool, folder, error_type, **options):
    started = time.perf_counter()
    with pytest.raises(error_type) as info:
        run_one(pool, folder, **options)
    assert time.perf_counter() - started < 5  # no real process, no grace period waited out
    return info.value


# --- a job that runs through ----------------------------------------------------------------


def test_a_value_comes_back_with_its_output_and_the_report(folder, capsys):
    pool = ScriptedPool([ready(), expect_job(), say("hello\n"), say("oops\n", "stderr"), sample(600 * MiB),
                         done(value={"score": 0.9}), exit_with(0)])
    started = time.perf_counter()
    result, job = run_one(pool, folder)
    assert time.perf_counter() - started < 1
    assert result.value == {"score": 0.9} and result.status == "ok" and result.error is None
    out, err = capsys.readouterr()
    assert out == "hello\n" and err == "oops\n"
    assert result.worker_state == "warm" and result.origin == "forked" and result.template_modules == ["numpy"]
    assert result.samples == 2 and result.child_rss_peak_bytes == 600 * MiB  # a sample, and the final one
    assert result.exit_code == 0 and result.last_output.splitlines() == ["hello", "oops"]
    assert [shipped.name for shipped in result.returned] == ["value"]
    (process,) = pool.processes
    assert process.request is not None and process.request.job.mode == "function"
    assert pool.released == [process] and not process.killed  # it ended by itself, then was released
    assert not os.path.exists(job.directory)  # the job's folder went with it


def test_quiet_keeps_the_output_out_of_the_cell_but_in_the_report(folder, capsys):
    pool = ScriptedPool([ready(), expect_job(), say("epoch 1\r"), say("epoch 2\n"), done(value=1), exit_with(0)])
    result, _ = run_one(pool, folder, forward_output=False)
    assert capsys.readouterr().out == ""
    assert result.last_output == "epoch 1\nepoch 2"


def test_jobs_side_by_side_print_whole_prefixed_lines(folder, capsys):
    scripts = [[ready(), expect_job(), say(f"job {i} starts, "), pause(0.02), say(f"ends\nno newline {i}"),
                done(value=i), exit_with(0)] for i in range(2)]
    pool = ScriptedPool(*scripts)
    runs = [JobRun(Job("function", folder()), SPEC, IsolatedResult(f"job {i}"), prefix=f"[{i}] ") for i in range(2)]
    drive(runs, LocalBackend(pool), at_once=2)
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == ["[0] job 0 starts, ends", "[0] no newline 0", "[1] job 1 starts, ends", "[1] no newline 1"]
    assert [run.result.value for run in runs] == [0, 1]


def test_the_phases_each_job_goes_through_are_reported(folder):
    pool = ScriptedPool([ready(), expect_job(), pause(0.05), done(value=1), exit_with(0)])
    seen = []
    run = JobRun(Job("function", folder()), SPEC, IsolatedResult("job"))
    drive([run], LocalBackend(pool), on_change=lambda changed: seen.append(changed.phase))
    assert seen[0] == "launching" and seen[-1] == "over"
    assert "running" in seen and seen == list(dict.fromkeys(seen))  # each phase once, in order


def test_the_heavy_modules_a_job_imported_are_taught_to_the_pool(folder):
    pool = ScriptedPool([ready(), expect_job(), done(value=1, imported=("pandas",)), exit_with(0)])
    result, _ = run_one(pool, folder)
    assert result.job_imported == ["pandas"] and pool.learned == ["pandas"]


def test_a_process_the_job_forked_cannot_speak_for_it(folder):
    pool = ScriptedPool([ready(), expect_job(), done(value="from a grandchild", sender=1), done(value="the job's"),
                         exit_with(0)])
    result, _ = run_one(pool, folder)
    assert result.value == "the job's"


def test_a_message_the_channel_does_not_carry_is_logged_and_skipped(folder, caplog):
    pool = ScriptedPool([ready(), expect_job(), send_raw({"kind": "bogus"}), done(value=3), exit_with(0)])
    with caplog.at_level(logging.WARNING, logger="kerasmagic.isolation.local"):
        result, _ = run_one(pool, folder)
    assert result.value == 3
    assert "does not carry 'bogus' messages" in caplog.text


def test_a_module_the_kernel_lacks_is_named_not_brought_back_and_the_rest_comes(folder):
    pool = ScriptedPool([ready(), expect_job(), done(outputs={"x": 1, "m": types.ModuleType("nomodule")}),
                         exit_with(0)])
    job = Job("code", folder(), outputs=["x", "m"])
    result = IsolatedResult("a cell")
    with warnings.catch_warnings():
        warnings.simplefilter("error", IsolationWarning)  # a cell's own import is not worth a warning
        run_job(job, SPEC, result, pool=pool)
    assert result.outputs == {"x": 1} and "is not imported in the kernel" in result.not_returned["m"]


def test_a_value_that_cannot_be_rebuilt_here_is_a_warning_not_a_failure(folder):
    pool = ScriptedPool([ready(), expect_job(), send(_unreadable_done), exit_with(0)])
    job = Job("code", folder(), outputs=["x", "broken"])
    result = IsolatedResult("a cell")
    with pytest.warns(IsolationWarning, match="broken: rebuilding it in the kernel failed"):
        run_job(job, SPEC, result, pool=pool)
    assert result.outputs == {"x": 1} and result.status == "ok"


def _unreadable_done(process):
    folder = process.request.job.directory
    return Done(outputs={"x": encode("x", 1, folder), "broken": {"format": "pickle", "data": b"not a pickle",
                                                                 "buffers": []}},
                final_sample={"rss_bytes": 1})


# --- a job that fails ------------------------------------------------------------------------------


def test_an_exception_in_the_code_is_raised_with_the_workers_traceback(folder):
    pool = ScriptedPool([ready(), expect_job(), raised("ZeroDivisionError", "division by zero"), exit_with(0)])
    error = failing(pool, folder, IsolatedCellError)
    assert error.exc_type == "ZeroDivisionError" and "Traceback in the worker process" in str(error)
    assert error.result.status == "error" and error.result.error == "ZeroDivisionError: division by zero"


def test_an_input_that_cannot_be_rebuilt_is_a_shipping_error(folder):
    pool = ScriptedPool([ready(), expect_job(), raised("AttributeError", "no class Net", stage="inputs", name="model"),
                         exit_with(0)])
    error = failing(pool, folder, IsolatedShippingError)
    assert error.name == "model" and "could not be rebuilt there" in str(error)


def test_a_crash_by_signal_names_the_signal_and_keeps_the_last_output(folder):
    pool = ScriptedPool([ready(), expect_job(), say("loading\n"), exit_with(-11)])
    error = failing(pool, folder, IsolatedCrash)
    assert error.signal_name == "SIGSEGV" and error.exit_code == -11
    assert "died of a segmentation fault (signal 11, SIGSEGV) before the job finished" in str(error)
    assert error.last_output == "loading" and error.result.status == "crash"


def test_a_sigkill_from_outside_hints_at_the_oom_killer(folder):
    pool = ScriptedPool([ready(), expect_job(), exit_with(-9)])
    error = failing(pool, folder, IsolatedCrash)
    assert "what the out-of-memory killer sends" in str(error) and "it printed nothing" in str(error)


def test_a_job_that_closed_its_channel_and_exited_says_so(folder):
    pool = ScriptedPool([ready(), expect_job(), close_channel(), exit_with(74)])
    error = failing(pool, folder, IsolatedCrash)
    assert "closed its channel to the kernel" in str(error) and "exit code 74" in str(error)


def test_a_process_that_cannot_import_is_a_crash_naming_the_error(folder):
    pool = ScriptedPool([import_failed("ModuleNotFoundError: No module named 'jax'"), exit_with(1)])
    error = failing(pool, folder, IsolatedCrash)
    assert "could not import numpy" in str(error) and "No module named 'jax'" in str(error)


def test_a_template_that_failed_to_import_fails_the_job(folder):
    pool = ScriptedPool(TemplateFailed("boom", "ImportError: no keras", "log"))
    error = failing(pool, folder, IsolatedCrash)
    assert "could not import" in str(error) and "ImportError: no keras" in str(error)


def test_a_process_that_cannot_be_started_is_a_crash(folder):
    pool = ScriptedPool(OSError(24, "Too many open files"))
    error = failing(pool, folder, IsolatedCrash)
    assert "could not start an isolated worker" in str(error) and "Too many open files" in str(error)


def test_a_job_past_its_timeout_is_killed_with_its_output_so_far(folder):
    pool = ScriptedPool([ready(), expect_job(), say("step 1\n"), hang()])
    error = failing(pool, folder, IsolatedTimeout, timeout=0.2)
    assert "ran past its timeout of 0.2 s" in str(error) and "its output so far:\nstep 1" in str(error)
    assert error.result.status == "timeout" and pool.processes[0].killed


def test_a_process_never_ready_within_the_timeout_is_a_timeout_before_the_job(folder):
    pool = ScriptedPool([hang()])
    error = failing(pool, folder, IsolatedTimeout, timeout=0.2)
    assert "no isolated worker was ready within the timeout of 0.2 s" in str(error)
    assert pool.processes[0].request is None and pool.processes[0].killed  # it never got the job


def test_a_job_over_its_memory_limit_is_killed_by_the_watch(folder):
    pool = ScriptedPool([ready(), expect_job(), say("allocating\n"), grow_to(500 * MiB + 300 * MiB), hang()])
    error = failing(pool, folder, IsolatedOutOfMemory, memory_limit_bytes=200 * MiB)
    assert "ran out of memory at 300 MiB of its 200 MiB limit: kerasmagic's watch killed its worker" in str(error)
    assert error.result.status == "out_of_memory" and pool.processes[0].killed
    assert error.result.memory_limit_how.endswith("(no memory cgroup: a scripted process)")


def test_ctrl_c_kills_the_job_and_raises_an_interrupt(folder, sigint_raises):
    pool = ScriptedPool([ready(), expect_job(), say("working\n"), interrupt(), hang()])
    error = failing(pool, folder, IsolatedInterrupt)
    assert str(error).startswith("interrupted; the isolated worker (pid") and error.result.status == "interrupted"
    assert pool.processes[0].killed


def test_the_first_failure_stops_the_others_and_cancels_the_rest(folder):
    pool = ScriptedPool([ready(), expect_job(), raised("ValueError", "bad item"), exit_with(0)],
                        [ready(), expect_job(), hang()],
                        [ready(), expect_job(), done(value=3), exit_with(0)])
    runs = [JobRun(Job("function", folder()), SPEC, IsolatedResult(f"job {i}")) for i in range(3)]
    drive(runs, LocalBackend(pool), at_once=2, stop_on_error=True)
    assert [run.result.status for run in runs] == ["error", "cancelled", "cancelled"]
    assert isinstance(runs[0].error, IsolatedCellError) and runs[1].error is None
    assert len(pool.processes) == 2 and pool.processes[1].killed  # the third never started


def test_one_backend_drives_again_after_a_drive(folder):
    # isolated_map's passes (its retries) drive the same backend in turn.
    pool = ScriptedPool([ready(), expect_job(), exit_with(-9)],
                        [ready(), expect_job(), done(value="retried"), exit_with(0)])
    backend = LocalBackend(pool)
    first, second = (JobRun(Job("function", folder()), SPEC, IsolatedResult(f"attempt {i}")) for i in (1, 2))
    drive([first], backend, stop_on_error=False)
    drive([second], backend)
    assert (first.result.status, second.result.status, second.result.value) == ("crash", "ok", "retried")


def test_collecting_goes_on_past_a_failure(folder):
    pool = ScriptedPool([ready(), expect_job(), exit_with(-9)],
                        [ready(), expect_job(), done(value=2), exit_with(0)])
    runs = [JobRun(Job("function", folder()), SPEC, IsolatedResult(f"job {i}")) for i in range(2)]
    drive(runs, LocalBackend(pool), at_once=1, stop_on_error=False)
    assert [run.result.status for run in runs] == ["crash", "ok"] and runs[1].result.value == 2


def test_every_job_publishes_its_start_and_its_report(folder):
    seen = []
    unsubscribe = events.subscribe(lambda kind, payload: seen.append((kind, payload.get("job_id"))))
    try:
        pool = ScriptedPool([ready(), expect_job(), sample(1 << 20), done(value=1), exit_with(0)])
        result, _ = run_one(pool, folder)
    finally:
        unsubscribe()
    ours = [kind for kind, job_id in seen if job_id == result.job_id]
    assert ours[0] == "isolated_started" and ours[-1] == "isolated_done" and "isolated_sample" in ours


# --- the seam: any backend plugs into the same loop ------------------------------------------------


class _TickBackend:
    """A backend without processes: each run ends after its number of ticks, as the test says."""

    not_started = "interrupted before anything started here"

    def __init__(self, ticks: dict[str, int], fail: str | None = None, interrupt_at: int | None = None) -> None:
        self.ticks, self.fail, self.interrupt_at = ticks, fail, interrupt_at
        self.calls: list[tuple[str, str]] = []
        self.waits = 0

    @property
    def capacity(self) -> int | None:
        return None

    def open(self, runs):
        self.calls.append(("open", str(len(runs))))

    def start(self, run):
        run.begin()
        self.calls.append(("start", run.label))

    def wait(self, runs):
        self.waits += 1
        if self.waits == self.interrupt_at:
            raise KeyboardInterrupt
        for run in runs:
            self.ticks[run.label] -= 1
            run.phase = "running"
            if self.ticks[run.label] == 0:
                if run.label == self.fail:
                    run.fail(IsolatedCrash("it broke", run.result))
                else:
                    run.phase = "over"
        return True

    def cancel(self, run, why):
        self.calls.append((f"cancel {why}", run.label))
        if why == "interrupt":
            run.fail(IsolatedInterrupt("interrupted here", run.result))
        else:
            run.cancel()

    def release(self, run):
        self.calls.append(("release", run.label))

    def close(self):
        self.calls.append(("close", ""))


def _runs(folder, *labels):
    return [JobRun(Job("function", folder()), SPEC, IsolatedResult(label)) for label in labels]


def test_the_loop_starts_at_most_at_once_and_releases_each_run_once(folder):
    backend = _TickBackend({"a": 1, "b": 3, "c": 1})
    runs = _runs(folder, "a", "b", "c")
    drive(runs, backend, at_once=2)
    assert [call for call in backend.calls if call[0] in ("start", "release")] == [
        ("start", "a"), ("start", "b"), ("release", "a"), ("start", "c"), ("release", "c"), ("release", "b")]
    assert backend.calls[0] == ("open", "3") and backend.calls[-1] == ("close", "")
    assert all(run.result.status == "ok" and run.result.wall_s >= 0 for run in runs)


def test_on_a_failure_the_loop_cancels_what_runs_and_what_waits(folder):
    backend = _TickBackend({"a": 1, "b": 5, "c": 1}, fail="a")
    runs = _runs(folder, "a", "b", "c")
    drive(runs, backend, at_once=2, stop_on_error=True)
    assert ("cancel other", "b") in backend.calls and ("start", "c") not in backend.calls
    assert [run.result.status for run in runs] == ["crash", "cancelled", "cancelled"]


def test_ctrl_c_in_a_backends_wait_interrupts_every_running_job(folder):
    backend = _TickBackend({"a": 5, "b": 5, "c": 5}, interrupt_at=2)
    runs = _runs(folder, "a", "b", "c")
    with pytest.raises(IsolatedInterrupt, match="interrupted here"):
        drive(runs, backend, at_once=2)
    assert [run.result.status for run in runs] == ["interrupted", "interrupted", "cancelled"]
    assert ("release", "a") in backend.calls and ("release", "b") in backend.calls


def test_a_backend_that_cannot_open_leaves_no_folder(folder):
    class Unreachable(_TickBackend):
        def open(self, runs):
            raise IsolationUsageError("no cluster at that address")

    runs = _runs(folder, "a", "b")
    with pytest.raises(IsolationUsageError):
        drive(runs, Unreachable({}))
    assert not any(os.path.exists(run.job.directory) for run in runs)


def test_a_node_joins_the_lines_of_a_maps_item_once_placed():
    sink = CellSink(IsolatedResult(), prefix="[3] ")
    sink.placed("10.0.0.7")
    sink.placed("10.0.0.7")  # sent again to the same node (its agent was restarted)
    assert sink.prefix == "[3 @ 10.0.0.7] "
    assert CellSink(IsolatedResult()).prefix == "" and _placed(CellSink(IsolatedResult()), "n1") == "[n1] "


def _placed(sink, where):
    sink.placed(where)
    return sink.prefix
