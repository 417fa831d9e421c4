"""The ``ray`` runtime on a real multi-node Ray cluster on this machine (slow: ``-m slow``).

A head node (1 CPU, no env resource) and a second node (``ray start --address``, its own process
group, 2 CPUs and the custom resource ``env_node``) form the cluster; the run joins it through
``runtime.ray.address`` and places its actors on the second node with
``runtime.ray.resources_per_worker``. Mid-run the second node is killed (its whole process group,
SIGKILL: raylet, object store, workers); a third node with the same resource joins, the replacement
actors start there, and the run finishes with the lost chunks discarded and none trained twice.

Each scenario runs in a fresh Python process (this file run as a script) that is the cluster's only
driver: a process that already ran a local Ray (other test modules) does not reliably start actors
on a second cluster, and the test process itself never touches Ray.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from omnigym.platform.runtime.ray_runtime import RayEnvWorker, RayRuntime
from omnigym.platform.trainers.on_policy import OnPolicyTrainer

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ray = pytest.importorskip("ray")
RESOURCE = "env_node"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """A head node plus worker nodes started with ``ray start --block``, each in its own process group."""

    def __init__(self, ray_cli: str, temp_dir: Path) -> None:
        self.ray_cli, self.temp_dir = ray_cli, temp_dir
        self.env = dict(os.environ)  # with the fixture's settings
        self.address = ""
        self.nodes: list[subprocess.Popen] = []

    def start_head(self) -> None:
        """The head node (1 CPU, no env resource), in its own process group; waits until it answers."""
        port = free_port()
        head = subprocess.Popen(
            [self.ray_cli, "start", "--head", f"--port={port}", "--num-cpus=1", "--block",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={self.temp_dir}"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.nodes.append(head)
        self.address = f"{ray.util.get_node_ip_address()}:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert head.poll() is None, "the head node process exited"
            try:
                ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
                return
            except ConnectionError:
                assert time.monotonic() < deadline, "the head node never answered"
                time.sleep(1.0)

    def add_node(self, cpus: int = 2) -> subprocess.Popen:
        """A node with ``cpus`` CPUs and the env resource; returns once the cluster counts it."""
        before = self.resource_total()
        node = subprocess.Popen(
            [self.ray_cli, "start", f"--address={self.address}", f"--num-cpus={cpus}",
             f'--resources={{"{RESOURCE}": {cpus}}}', "--block", "--disable-usage-stats"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.nodes.append(node)
        deadline = time.monotonic() + 120
        while self.resource_total() < before + cpus:
            assert node.poll() is None, "the node process exited"
            assert time.monotonic() < deadline, "the node never joined the cluster"
            time.sleep(0.5)
        return node

    def kill_node(self, node: subprocess.Popen) -> None:
        """SIGKILL the node's whole process group (raylet, object store, its workers)."""
        os.killpg(node.pid, signal.SIGKILL)
        node.wait(timeout=30)

    def wait_until_dead(self, node_ids: set[str], within_s: float = 120.0) -> None:
        """Until Ray's control store has noticed the nodes are gone (a health check: seconds)."""
        deadline = time.monotonic() + within_s
        while any(n["Alive"] and n["NodeID"] in node_ids for n in ray.nodes()):
            assert time.monotonic() < deadline, "Ray never noticed the node died"
            time.sleep(0.5)

    def resource_total(self) -> float:
        """The env resource of the live nodes (this process is a driver of the cluster)."""
        total = sum(n["Resources"].get(RESOURCE, 0.0) for n in ray.nodes() if n["Alive"])
        return float(total)

    def node_ids_with_resource(self) -> set[str]:
        return {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get(RESOURCE)}

    def stop(self) -> None:
        if ray.is_initialized():
            ray.shutdown()
        # this cluster's process groups only: never `ray stop`, which would stop every Ray on the
        # machine, a developer's own included
        for node in self.nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            node.wait(timeout=30)


def runtime_helpers() -> Any:
    """This folder's ``conftest.py`` (the shared experiment and checks), loaded by path."""
    spec = importlib.util.spec_from_file_location("runtime_conftest", Path(__file__).with_name("conftest.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def node_loss(cluster: Cluster, run_dir: Path) -> dict[str, Any]:
    """Train on node B, kill it, bring node C: where the actors ran and what the learner consumed."""
    helpers = runtime_helpers()
    first_node = cluster.add_node()
    node_b = cluster.node_ids_with_resource()
    config = helpers.runtime_experiment(
        run_dir,
        "ray",
        total_steps=128 * 3000,  # a cap: the run stops once the checks can be made
        runtime={
            "ray": {"address": cluster.address, "resources_per_worker": {RESOURCE: 1}},
            "poll_interval_s": 0.2,
        },
    )
    trainer = OnPolicyTrainer(config, run_dir)
    runtime = trainer.runtime
    assert isinstance(runtime, RayRuntime)
    try:
        while trainer.iteration < 4:
            trainer.train_iteration()
        placed_before = {w.remote_where()["node_id"] for w in runtime.workers if isinstance(w, RayEnvWorker)}
        cluster.kill_node(first_node)  # both actors die with it
        cluster.wait_until_dead(node_b)  # replacements placed on a node Ray still counts alive fail again
        cluster.add_node()  # the replacements need the resource: a new node brings it
        node_c = cluster.node_ids_with_resource() - node_b
        replaced_at = None
        while replaced_at is None or trainer.iteration < replaced_at + 5:
            lines = trainer.train_iteration()
            lost = dict(runtime.discarded_ids)  # worker id -> its lost sequence
            fresh = all(any(w == k and s > q for (w, s), _, _ in runtime.consumed) for k, q in lost.items())
            if replaced_at is None and set(lost) == {0, 1} and fresh:
                replaced_at = trainer.iteration
            assert trainer.iteration < 1500, "the replacements never delivered chunks"
        placed_after = {w.remote_where()["node_id"] for w in runtime.workers if isinstance(w, RayEnvWorker)}
    finally:
        trainer.close()
    helpers.assert_exactly_once(runtime.consumed, runtime.discarded_ids)
    staleness = [learner - version for _, version, learner in runtime.consumed]
    return {
        "node_b": sorted(node_b),
        "node_c": sorted(node_c),
        "placed_before": sorted(placed_before),
        "placed_after": sorted(placed_after),
        "restarts": runtime.pool.restarts,
        "restarts_logged": lines["runtime/restarts"],
        "discarded_workers": sorted(w for w, _ in runtime.discarded_ids),
        "duplicates": runtime.data.metrics().duplicates,
        "max_staleness": max(staleness),
        "eta": config.runtime.max_staleness,
        "iterations_after_replacement": trainer.iteration - replaced_at,
    }


def missing_resource(cluster: Cluster, run_dir: Path) -> dict[str, Any]:
    """A run that asks for a resource no node has: the error it stops with."""
    config = runtime_helpers().runtime_experiment(
        run_dir,
        "ray",
        runtime={
            "ray": {"address": cluster.address, "cpus_per_worker": 0.5, "resources_per_worker": {RESOURCE: 1}}
        },
    )
    try:
        OnPolicyTrainer(config, run_dir).train()
    except ValueError as error:
        return {"error": str(error)}
    return {"error": None}


SCENARIOS = {"node_loss": node_loss, "missing_resource": missing_resource}


def run_scenario(name: str, run_dir: Path) -> dict[str, Any]:
    """Start a cluster, run the scenario as its driver, stop the cluster (this process's groups only)."""
    ray_cli = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
    # Ray's socket paths must stay short: a temp dir under /tmp, not pytest's deep one
    temp_dir = Path(f"/tmp/omnigym-ray-{os.getpid()}")
    cluster = Cluster(ray_cli, temp_dir)
    try:
        cluster.start_head()
        return SCENARIOS[name](cluster, run_dir)
    finally:
        cluster.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)


def in_fresh_process(name: str, run_dir: Path) -> dict[str, Any]:
    """The scenario's facts, from this file run as a script (its last stdout line is JSON)."""
    # a throwaway cluster: Ray's token authentication off for its nodes and its driver alike
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    out = subprocess.run(
        [sys.executable, __file__, name, str(run_dir)], capture_output=True, text=True, env=env, timeout=900
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_workers_run_on_the_second_node_and_survive_losing_it(tmp_path: Path) -> None:
    facts = in_fresh_process("node_loss", tmp_path / "run")
    assert len(facts["node_b"]) == 1 and facts["placed_before"] == facts["node_b"]
    assert len(facts["node_c"]) == 1 and facts["placed_after"] == facts["node_c"] != facts["node_b"]
    assert facts["restarts"] == 2 and facts["restarts_logged"] == 2.0
    assert facts["discarded_workers"] == [0, 1]  # one in-flight chunk each, never trained on
    assert facts["duplicates"] == 0 and facts["max_staleness"] <= facts["eta"]
    assert facts["iterations_after_replacement"] >= 5


def test_a_cluster_without_the_resource_is_a_clear_error(tmp_path: Path) -> None:
    error = in_fresh_process("missing_resource", tmp_path / "run")["error"]
    assert error is not None and "env_node: 1 need 2 but the Ray cluster has 0" in error
    assert "ray start --resources" in error


if __name__ == "__main__":
    print(json.dumps(run_scenario(sys.argv[1], Path(sys.argv[2]))))
