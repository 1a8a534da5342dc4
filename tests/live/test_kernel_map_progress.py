"""An isolated_map's counts reach the sidebar: a real ipykernel with the comm open runs a map
with a retry, and the jobs list carries each attempt and the map's done / running / failed / left."""

import json

import pytest

from kerasmagic.live.protocol import PROTOCOL_VERSION, validate

pytestmark = [pytest.mark.kernel, pytest.mark.isolation]

SETUP = """
%load_ext kerasmagic
import json, os, signal, tempfile
from kerasmagic import isolated_map
MARKERS = tempfile.mkdtemp()

def fold(k):
    import os, signal, time
    time.sleep(0.2)
    marker = os.path.join(MARKERS, f"tried-{k}")
    if k == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGSEGV)
    return k
"""


def test_the_jobs_list_shows_the_maps_counts_and_each_attempt(kernel):
    kernel.execute(SETUP)
    comm_id = kernel.open_comm(protocol_version=PROTOCOL_VERSION)
    kernel.comm_data(comm_id, "hello")
    kernel.comm_data(comm_id, "isolated_jobs")
    kernel.execute("result = isolated_map(fold, range(3), retries=1, progress=False)\n"
                   "print(json.dumps(list(result)))", timeout=180)
    kernel.execute("pass")  # everything the cell sent has been read now
    messages = [m["content"]["data"] for m in kernel.comm_messages(comm_id)
                if m["content"]["data"]["method"].startswith("isolated_")]
    for message in messages:
        validate(message, "to_frontend")
    listings = [m for m in messages if m["method"] == "isolated_jobs" and m["jobs"]]
    progress = [job["map_progress"] for m in listings for job in m["jobs"] if "map_progress" in job]
    assert progress, "no isolated_jobs list carried the map's counts"
    last = progress[-1]
    assert (last["total"], last["done"], last["running"], last["failed"], last["left"]) == (3, 3, 0, 0, 0), last
    # On the way: the crashed item was counted as left again (its retry), never as failed.
    assert any(p["done"] >= 1 and p["left"] >= 1 for p in progress), json.dumps(progress)
    assert all(p["failed"] == 0 for p in progress)
    labels = {m["job"]["label"] for m in messages if m["method"] == "isolated_started"}
    assert "isolated_map item [1], attempt 1 of 2" in labels and "isolated_map item [1], attempt 2 of 2" in labels
    final = listings[-1]["jobs"]
    assert all(job.get("map_progress", {}).get("done") == 3 for job in final if job["label"].startswith("isolated_map"))
