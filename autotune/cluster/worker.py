"""`autotune worker`: join a Ray cluster as a node and measure on this host's devices.

The command starts a Ray node (``ray start --block``, a child that dies with it) that
advertises each device's target as a custom resource (`devices.resource_name`), connects as
a driver, and starts one measurement actor per device, pinned to this node by a resource
of its own: a CPU actor takes all of the node's CPUs (no other Ray work runs here while it
times), a GPU actor one GPU. Actors are owned by this process: they die with it, and their
build and run processes with them. An actor that dies (a kernel took it down, it ran out
of memory) is started again under a new incarnation name.
"""
from __future__ import annotations

import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from autotune.cluster import ACTOR_PREFIX, NAMESPACE
from autotune.cluster.actor import MeasureWorker, SleepDevice
from autotune.cluster.devices import Device, resource_name
from autotune.measure.options import MeasureOptions

log = logging.getLogger("autotune.cluster")

NODE_START_S = 120.0   # for `ray start` to join the cluster
# Chunks and results are a few kB: the node's object store need not take 30% of memory.
OBJECT_STORE_BYTES = 256 * 2**20
ACTOR_START_S = 180.0  # for an actor to import, check its device and warm up its processes
SUPERVISE_S = 2.0      # how often dead actors are looked for


@dataclass(frozen=True)
class WorkerPlan:
    """What one `autotune worker` runs: its id, devices, and how they measure."""

    worker_id: str
    devices: tuple[Device, ...]
    options: MeasureOptions
    synthetic: Optional[SleepDevice] = None

    def resources(self) -> dict[str, float]:
        """The node's custom resources: one per device of each target, and the node's own."""
        out: dict[str, float] = {self.node_resource: float(len(self.devices))}
        for device in self.devices:
            name = resource_name(device.key)
            out[name] = out.get(name, 0.0) + 1.0
        return out

    @property
    def node_resource(self) -> str:
        return f"autotune-node-{self.worker_id}"

    def actor_id(self, index: int, generation: int) -> str:
        device = self.devices[index]
        kind = "cpu" if device.gpu is None else f"gpu{device.gpu}"
        if self.synthetic is not None:
            kind = f"sim{index}"
        return f"{self.worker_id}/{kind}" + (f"#{generation}" if generation > 1 else "")


def new_worker_id() -> str:
    """This host's name and a random token (several workers may share a host)."""
    return f"{socket.gethostname()}-{secrets.token_hex(3)}"


def start_node(address: str, plan: WorkerPlan, *, num_cpus: int,
               num_gpus: int) -> subprocess.Popen:
    """``ray start --block`` joining ``address`` with the plan's resources; dies with us."""
    ray_cmd = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if ray_cmd is None:
        raise RuntimeError("the `ray` command is missing: pip install 'autotune[cluster]'")
    cmd = [ray_cmd, "start", "--address", address, "--block", "--disable-usage-stats",
           f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
           f"--resources={json.dumps(plan.resources())}",
           f"--object-store-memory={OBJECT_STORE_BYTES}",
           # several nodes may share a host (tests, benchmarks): no fixed agent port
           "--dashboard-agent-listen-port=0"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=_term_with_parent)


def _term_with_parent() -> None:
    """In the `ray start` child: SIGTERM when we die (it then stops its node's processes)."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def wait_for_node(plan: WorkerPlan, node: subprocess.Popen) -> str:
    """The Ray node id of our node, once it is alive in the cluster."""
    import ray

    deadline = time.monotonic() + NODE_START_S
    while time.monotonic() < deadline:
        if node.poll() is not None:
            err = (node.stderr.read() if node.stderr else b"").decode(errors="replace")
            raise RuntimeError(f"`ray start` exited with {node.returncode}: {err[-2000:]}")
        for info in ray.nodes():
            if info.get("Alive") and plan.node_resource in info.get("Resources", {}):
                return str(info["NodeID"])
        time.sleep(0.5)
    raise RuntimeError(f"our Ray node did not join the cluster in {NODE_START_S:g} s")


def start_actor(plan: WorkerPlan, index: int, generation: int, num_cpus: int) -> Any:
    """One measurement actor for device ``index``, owned by this process."""
    import ray

    device = plan.devices[index]
    resources = {plan.node_resource: 1.0, resource_name(device.key): 1.0}
    gpu = 1 if device.gpu is not None and plan.synthetic is None else 0
    cpus = 0 if gpu or plan.synthetic is not None else num_cpus
    # status answers from its own thread while a chunk is measured
    # Ray's typed overloads of remote() leave out concurrency_groups, which it accepts.
    actor_cls = ray.remote(concurrency_groups={"status": 1})(  # type: ignore[call-overload]
        MeasureWorker)
    return actor_cls.options(
        name=ACTOR_PREFIX + plan.actor_id(index, generation), namespace=NAMESPACE,
        num_cpus=cpus, num_gpus=gpu, resources=resources, max_restarts=0,
    ).remote(plan.actor_id(index, generation), device, plan.options, plan.synthetic)


def ready(actor: Any) -> dict[str, Any]:
    """The actor's first status (its constructor has run), or the reason it failed."""
    import ray

    try:
        return ray.get(actor.status.remote(), timeout=ACTOR_START_S)
    except ray.exceptions.RayActorError as err:
        cause = getattr(err, "cause", None) or err
        raise RuntimeError(f"a measurement actor failed to start: {cause}") from None


class Worker:
    """Runs a plan on a cluster until ``stop`` (or a signal): node, actors, supervision."""

    def __init__(self, address: str, plan: WorkerPlan, *, num_cpus: int, num_gpus: int,
                 out: Any = sys.stderr) -> None:
        self.address, self.plan, self.out = address, plan, out
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.node: Optional[subprocess.Popen] = None
        self.actors: list[Any] = []
        self.generations: list[int] = []
        self._stop = threading.Event()

    def run(self) -> int:
        import ray

        try:
            self.node = start_node(self.address, self.plan, num_cpus=self.num_cpus,
                                   num_gpus=self.num_gpus)
            ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False,
                     configure_logging=False)
            wait_for_node(self.plan, self.node)
            for index in range(len(self.plan.devices)):
                self.generations.append(1)
                self.actors.append(start_actor(self.plan, index, 1, self.num_cpus))
            for index, actor in enumerate(self.actors):
                status = ready(actor)
                print(f"autotune worker: measuring {status['target']} on {status['device']} "
                      f"as {self.plan.actor_id(index, 1)}", file=self.out, flush=True)
            print(f"autotune worker: ready ({len(self.actors)} device(s)); Ctrl-C stops",
                  file=self.out, flush=True)
            self._supervise()
            return 0
        finally:
            self.shutdown()

    def stop(self) -> None:
        self._stop.set()

    def _supervise(self) -> None:
        """Restart actors that died, until stopped or the node is gone."""
        import ray

        while not self._stop.wait(SUPERVISE_S):
            if self.node is not None and self.node.poll() is not None:
                raise RuntimeError(f"the Ray node exited with {self.node.returncode}")
            for index, actor in enumerate(self.actors):
                try:
                    ray.get(actor.status.options(concurrency_group="status").remote(),
                            timeout=60)
                except ray.exceptions.RayActorError as err:
                    self.generations[index] += 1
                    gen = self.generations[index]
                    log.warning("actor %s died (%s); starting %s",
                                self.plan.actor_id(index, gen - 1),
                                str(err).splitlines()[0], self.plan.actor_id(index, gen))
                    self.actors[index] = start_actor(self.plan, index, gen, self.num_cpus)
                except ray.exceptions.GetTimeoutError:
                    pass  # busy answering: ask again next round

    def shutdown(self) -> None:
        """Stop the actors (and their processes), leave the cluster, stop the node."""
        import ray

        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if ray.is_initialized():
            ray.shutdown()
        if self.node is not None and self.node.poll() is None:
            self.node.terminate()
            try:
                self.node.wait(30)
            except subprocess.TimeoutExpired:
                self.node.kill()


def run(address: str, plan: WorkerPlan, *, num_cpus: int, num_gpus: int) -> int:
    """Run a worker in the foreground; SIGTERM and SIGINT stop it cleanly."""
    worker = Worker(address, plan, num_cpus=num_cpus, num_gpus=num_gpus)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.stop())
    return worker.run()


def plan_for(devices: Sequence[Device], options: MeasureOptions,
             synthetic: Optional[SleepDevice] = None) -> WorkerPlan:
    return WorkerPlan(new_worker_id(), tuple(devices), options, synthetic)
