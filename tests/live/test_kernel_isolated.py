"""Isolated jobs reach the sidebar: run_isolated in a real ipykernel with the comm open
(jupyter_client), the isolated_started / isolated_sample / isolated_done messages, and the
isolated_jobs list a sidebar gets when it attaches later."""

import json

import pytest

from kerasmagic.live.protocol import PROTOCOL_VERSION, validate

pytestmark = [pytest.mark.kernel, pytest.mark.isolation]

JOB_S = 2.0

SETUP = """
%load_ext kerasmagic
import time
from kerasmagic import run_isolated

def work(seconds):
    import time
    data = bytearray(64 * 2**20)  # 64 MiB the job's process holds, then gives back
    time.sleep(seconds)
    return len(data)

def boom():
    raise ValueError("item 1 is bad")
"""

RUN_OK = f"""
result = run_isolated(work, args=({JOB_S},), quiet=True)
print(json.dumps({{"job_id": result.job_id, "status": result.status, "wall_s": result.wall_s}}))
"""

RUN_FAILING = """
try:
    run_isolated(boom, quiet=True)
except Exception as exc:
    print(json.dumps({"job_id": exc.result.job_id, "status": exc.result.status, "wall_s": exc.result.wall_s}))
"""


def _isolated(kernel, comm_id):
    return [m["content"]["data"] for m in kernel.comm_messages(comm_id)
            if m["content"]["data"]["method"].startswith("isolated_")]


def test_run_isolated_reaches_the_sidebar_and_a_late_one_gets_the_list(kernel):
    kernel.execute("import json\n" + SETUP)
    comm_id = kernel.open_comm(protocol_version=PROTOCOL_VERSION)
    # An old sidebar (protocol 1.0) beside it: it must get none of the new messages.
    old_id = kernel.open_comm(protocol_version="1.0.0")
    kernel.comm_data(comm_id, "hello")
    assert kernel.comm_data(comm_id, "isolated_jobs")["jobs"] == []  # the list comes right after hello
    kernel.comm_data(old_id, "hello")

    ok = json.loads(kernel.execute(RUN_OK, timeout=180))
    failing = json.loads(kernel.execute(RUN_FAILING, timeout=180))
    assert (ok["status"], failing["status"]) == ("ok", "error")
    kernel.execute("pass")  # everything the cells sent has been read now

    messages = _isolated(kernel, comm_id)
    for message in messages:
        validate(message, "to_frontend")
        assert len(json.dumps(message)) < 1000, message  # per job, never the whole report
    by_job = {}
    for message in messages:
        if message["method"] == "isolated_jobs":
            continue  # the (empty) list on open
        job_id = message.get("job_id") or message.get("job", {}).get("job_id")
        by_job.setdefault(job_id, []).append(message)

    # The job that ran: started, samples (throttled to ~2 a second), done.
    run = by_job[ok["job_id"]]
    methods = [m["method"] for m in run]
    assert methods[0] == "isolated_started" and methods[-1] == "isolated_done", methods
    assert run[0]["job"]["status"] == "running" and run[0]["job"]["on"] == "local"
    assert run[0]["job"]["node"] is None
    samples = [m for m in run if m["method"] == "isolated_sample"]
    # The worker samples 4 times a second; the channel forwards at most one per 0.5 s.
    assert 1 <= len(samples) <= 2 * ok["wall_s"] + 1, (len(samples), ok["wall_s"])
    gaps = [b["ts"] - a["ts"] for a, b in zip(samples, samples[1:], strict=False)]
    assert all(gap >= 0.45 for gap in gaps), gaps
    assert max(s["rss_peak_bytes"] for s in samples) > 64 * 2**20
    finished = run[-1]["job"]
    assert finished["status"] == "ok" and finished["rss_peak_bytes"] > 64 * 2**20
    assert finished["wall_s"] == pytest.approx(ok["wall_s"]) and finished["wall_s"] >= JOB_S
    assert "error" not in finished

    # The failing job: started, then done with status error and the exception's line.
    fail = by_job[failing["job_id"]]
    assert fail[0]["method"] == "isolated_started" and fail[-1]["method"] == "isolated_done"
    assert fail[-1]["job"]["status"] == "error"
    assert fail[-1]["job"]["error"] == "ValueError: item 1 is bad"
    assert set(by_job) == {ok["job_id"], failing["job_id"]}

    # The 1.0 sidebar got neither the new messages nor the raw isolated_* events.
    old = [m["content"]["data"] for m in kernel.comm_messages(old_id)]
    assert not [m for m in old if m["method"].startswith("isolated_")
                or str(m.get("kind", "")).startswith("isolated_")], old

    # A sidebar that attaches later (a page reload) gets both jobs, the newest first.
    late = kernel.open_comm(protocol_version=PROTOCOL_VERSION)
    listing = kernel.comm_data(late, "isolated_jobs")
    validate(listing, "to_frontend")
    assert [(j["job_id"], j["status"]) for j in listing["jobs"]] == [
        (failing["job_id"], "error"), (ok["job_id"], "ok")]


def test_a_hidden_sidebar_gets_started_and_done_but_no_samples(kernel):
    kernel.execute("import json\n" + SETUP)
    comm_id = kernel.open_comm(protocol_version=PROTOCOL_VERSION)
    kernel.comm_data(comm_id, "isolated_jobs")
    kernel.send_comm(comm_id, {"method": "visibility", "visible": False})
    ok = json.loads(kernel.execute(RUN_OK.replace(f"({JOB_S},)", "(1.2,)"), timeout=180))
    kernel.execute("pass")
    methods = [m["method"] for m in _isolated(kernel, comm_id)]
    assert methods == ["isolated_jobs", "isolated_started", "isolated_done"], methods
    # Shown again: the list comes with the job's peaks, which the skipped samples carried.
    kernel.send_comm(comm_id, {"method": "visibility", "visible": True})
    listing = kernel.comm_data(comm_id, "isolated_jobs")
    assert listing["jobs"][0]["job_id"] == ok["job_id"]
    assert listing["jobs"][0]["rss_peak_bytes"] > 64 * 2**20
