"""A real two-node Ray cluster on this machine for the whole session, stopped at the end.

``ray.cluster_utils.Cluster`` starts a head node and more nodes as separate raylets (each its
own object store and workers) on one machine: what a multi-node cluster is to kerasmagic,
without a second machine. Small CPU counts and object stores keep it light on a 2-core CI box.
"""

from __future__ import annotations

import os
import tempfile

import pytest

ray = pytest.importorskip("ray", reason="the cluster tests need Ray: pip install -e '.[test]' installs it")

#: Ray's smallest object store; the default (30 % of RAM per node) would be far too much here.
_OBJECT_STORE_BYTES = 80 * 1024 * 1024


def node_args(**extra):
    return {"num_cpus": 1, "object_store_memory": _OBJECT_STORE_BYTES, "include_dashboard": False, **extra}


def _ray_processes(session_dir: str, agent_pids: list[int]) -> list:
    """The cluster's processes still alive: Ray's own (named by the session) and the isolation
    templates its agents started. Templates of this process's local pool, or of another
    test run on the machine, are not the cluster's."""
    import psutil

    parents = {f"--parent-pid {pid} " for pid in agent_pids}
    found = []
    for process in psutil.process_iter(["cmdline", "pid"]):
        line = " ".join(process.info["cmdline"] or []) + " "
        template_of_an_agent = "kerasmagic.isolation.template" in line and any(p in line for p in parents)
        if session_dir in line or template_of_an_agent:
            found.append((process.pid, line[:160]))
    return found


@pytest.fixture
def add_node(cluster):
    """Add one more 1-CPU node to the session's cluster (a test that kills a node kills its own)."""
    def add(**extra):
        node = cluster.add_node(**node_args(**extra))
        cluster.wait_for_nodes()
        return node

    return add


@pytest.fixture(scope="module")
def cluster():
    """Head (1 CPU) + a second node (1 CPU), connected; at the end nothing of it may be left.

    Module-scoped, so that Ray is gone before other test folders run: the nodes' raylets
    are this process's children, and their agents' idle templates would otherwise look
    like leftovers to the isolation tests that count this process's workers.
    """
    from ray.cluster_utils import Cluster

    from kerasmagic.isolation.cluster.remote import close_cluster_session, describe_agents

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args=node_args())
    second = cluster.add_node(**node_args())
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    session_dir = cluster.head_node.get_session_dir_path()
    cluster.second = second
    yield cluster
    agent_pids = [agent["agent_pid"] for agent in describe_agents()]
    assert agent_pids, "no agent ran during the session"
    close_cluster_session()
    ray.shutdown()
    cluster.shutdown()
    import time

    deadline = time.monotonic() + 20
    while _ray_processes(session_dir, agent_pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _ray_processes(session_dir, agent_pids)
    assert not left, f"processes of the test cluster outlived it: {left}"
    # Other processes of this machine may own kerasmagic files too: look for the agents' own.
    left_files = [name for folder in ("/dev/shm", tempfile.gettempdir()) if os.path.isdir(folder)
                  for name in os.listdir(folder) if any(f"-{pid}-" in name for pid in agent_pids)]
    assert not left_files, f"files the cluster's agents left behind: {left_files}"
