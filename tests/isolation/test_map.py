"""isolated_map(): many items, each in its own forked process, results in input order."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from process_checks import gone

from kerasmagic.isolation import IsolatedCellError, IsolatedMapResult, IsolationUsageError, isolated_map, run_isolated
from kerasmagic.isolation.pool import default_pool

pytestmark = pytest.mark.isolation


def square_after(item):
    import os
    import time

    delay, value = item
    time.sleep(delay)
    return value * value, os.getpid()


def fail_on_three(k):
    if k == 3:
        raise ValueError(f"bad item {k}")
    return k


def test_results_come_back_in_input_order_even_when_they_finish_out_of_order(capsys):
    items = [(0.6, 1), (0.0, 2), (0.3, 3), (0.0, 4)]
    result = isolated_map(square_after, items, workers=2)
    assert isinstance(result, IsolatedMapResult)
    assert [value for value, _ in result] == [1, 4, 9, 16]
    pids = {pid for _, pid in result}
    assert len(pids) == 4 and not pids & set(default_pool().template_pids())  # a process per item
    assert all(job.origin == "forked" and job.status == "ok" for job in result.jobs)
    text = str(result)
    assert "isolated_map ran 4 job(s), 4 ok" in text and "(2 at a time)" in text
    assert result.to_dict()["jobs"][0]["status"] == "ok" and result.failed == []
    assert "isolated_map: job [3] ok" in capsys.readouterr().err  # the progress, as text outside a notebook


def sleep_between_clock_reads(delay):
    import time

    started = time.time()
    time.sleep(delay)
    return started, time.time()


def test_two_workers_run_at_the_same_time():
    # Each job reads the clock as it starts and ends: side by side, each starts before the other ends.
    # (Not the wall time of the map: on a loaded machine a fork can take longer than a job.)
    (first_start, first_end), (second_start, second_end) = isolated_map(
        sleep_between_clock_reads, [1.0, 1.0], workers=2, progress=False)
    assert first_start < second_end and second_start < first_end, (
        f"the jobs ran one after the other: {first_start:.2f}-{first_end:.2f}, {second_start:.2f}-{second_end:.2f}")


def test_collect_keeps_going_and_puts_the_exception_in_place():
    result = isolated_map(fail_on_three, range(6), workers=2, on_error="collect", progress=False)
    assert list(result)[:3] == [0, 1, 2] and list(result)[4:] == [4, 5]
    assert isinstance(result[3], IsolatedCellError) and "bad item 3" in str(result[3])
    assert result.failed == [3]
    assert "error: ValueError: bad item 3" in str(result)


def test_raise_stops_at_the_first_failure_and_kills_the_rest(list_workers):
    with pytest.raises(IsolatedCellError, match="bad item 3") as info:
        isolated_map(fail_on_three, range(12), workers=1, progress=False)
    partial = info.value.map_result
    statuses = [job.status for job in partial.jobs]
    assert statuses[:4] == ["ok", "ok", "ok", "error"]
    assert set(statuses[4:]) == {"cancelled"}  # never started
    assert {p.pid for p in list_workers()} <= set(default_pool().template_pids())


def test_ctrl_c_kills_every_running_job(sigint_raises, list_workers):
    default_pool().prestart()
    assert default_pool().wait_until_warm(timeout=120)
    timer = threading.Timer(1.5, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            isolated_map(square_after, [(60, i) for i in range(4)], workers=2, progress=False)
    finally:
        timer.cancel()
    partial = info.value.map_result
    assert [job.status for job in partial.jobs] == ["interrupted", "interrupted", "cancelled", "cancelled"]
    for index, job in enumerate(partial.jobs[:2]):
        # Killed by the time the map raised: gone, or a zombie (the template reaps it). No wait.
        assert gone(job.worker_pid, within=0.05), f"job {index}'s process {job.worker_pid} outlived Ctrl-C"
    assert {p.pid for p in list_workers()} <= set(default_pool().template_pids())


def test_a_function_sent_once_reaches_every_item_with_what_it_closes_over():
    import numpy as np

    data = np.arange(4 << 20, dtype=np.uint8)  # 4 MiB: out of band, one file for all items

    def pick(k):
        return int(data[k * 1000])

    result = isolated_map(pick, range(5), workers=2, progress=False)
    assert list(result) == [int(data[k * 1000]) for k in range(5)]
    assert [s.name for s in result.jobs[0].sent] == ["pick", "item [0]"]
    assert [s.name for s in result.jobs[1].sent] == ["item [1]"]  # the function went once
    assert not [path for path in os.listdir("/dev/shm") if path.startswith(f"kerasmagic-isolated-{os.getpid()}-")]


@pytest.mark.parametrize("kwargs, match", [
    ({"workers": 0}, "workers is how many jobs run at once"),
    ({"workers": True}, "workers is how many jobs run at once"),
    ({"on_error": "ignore"}, "on_error takes 'raise'"),
    ({"gpu": "first"}, "'first' is not a GPU"),
    ({"gpu": []}, "names no GPU"),
    ({"timeout": -1}, "timeout"),
])
def test_bad_options_say_what_to_do(kwargs, match):
    before = default_pool().pids()
    with pytest.raises(IsolationUsageError, match=match):
        isolated_map(fail_on_three, range(3), **kwargs)
    assert default_pool().pids() == before  # nothing started


def test_round_robin_without_a_gpu_says_so(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(IsolationUsageError, match="spreads jobs over NVIDIA GPUs, and there is none here"):
        isolated_map(fail_on_three, range(3), gpu="round-robin")


def test_a_gpu_list_sets_each_jobs_devices():
    def visible(_):
        import os

        return os.environ.get("CUDA_VISIBLE_DEVICES")

    result = isolated_map(visible, range(4), gpu=[0, "1"], progress=False)
    assert list(result) == ["0", "1", "0", "1"]
    assert {job.template_pid for job in result.jobs} == {result.jobs[0].template_pid}  # one template for all


def test_workers_beyond_the_pool_size_are_capped_and_said(monkeypatch):
    from kerasmagic.isolation import configure_pool

    configure_pool(size=1)
    try:
        result = isolated_map(fail_on_three, range(2), workers=3, progress=False)
    finally:
        configure_pool(size=2)
    assert result.at_once == 1 and "capped at 1" in str(result)


def test_run_isolated_and_map_leave_the_kernel_flat():
    from kerasmagic.probes.process import rss_bytes

    run_isolated("x = 1", quiet=True)
    before = rss_bytes()
    isolated_map(fail_on_three, [0, 1, 2] * 4, workers=2, progress=False)
    assert rss_bytes() - before < 20 * 2**20
