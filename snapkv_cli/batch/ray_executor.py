"""A batch on a Ray cluster: one actor per device, each holding one loaded model, documents handed to idle actors.

Each actor is a :class:`~.worker.BatchWorker` with ``num_gpus=1`` where the cluster has GPUs (Ray gives it its own
device), else a CPU actor with an even share of the cluster's CPUs (Ray sets its threads to that share). The driver
reads each document, gives it to an idle actor with its questions, and records every answer as it comes back: the
output is written once, in one place, resumable as in a local run. An actor that dies mid-document loses nothing:
its unanswered questions go to another actor before any document not started yet (``max_attempts`` tries per
document in all), a fresh actor takes its place, and the summary counts the failure.

Ray is an optional extra (``pip install 'snapkv-cli[ray]'``); it is imported only here, only when used.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..answering.runner import RunOptions
from ..errors import InvalidValue, RayUnavailable, UserError
from .driver import Executor, Recorder, Task, read_document
from .lines import describe_error
from .worker import BatchWorker

MAX_ATTEMPTS = 3


def import_ray():
    """The ``ray`` module, or :class:`~snapkv_cli.errors.RayUnavailable` naming the install command."""
    try:
        import ray
    except ImportError as error:
        missing = getattr(error, "name", None)
        raise RayUnavailable("it is not installed" if missing in ("ray", None) else f"importing it failed ({error})") \
            from None
    return ray


def ray_workers(count: int) -> str:
    return f"{count} Ray worker{'s' * (count != 1)}"


@dataclass
class Slot:
    """One actor and what it is doing: loading its model (``loading``), or answering ``task``'s questions, whose
    results come back in order (``pending``: ``(result, index, question)``)."""

    number: int
    actor: object
    loading: object | None = None
    task: Task | None = None
    pending: list[tuple[object, int, str]] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        return self.loading is None and self.task is None


class RayExecutor(Executor):
    """Runs a batch's tasks on Ray actors (see the module's docstring).

    workers: actors to start (default: one per GPU of the cluster, else one per node); address: the cluster to join
    (None: ``RAY_ADDRESS`` if set, else a Ray started here for this run); max_attempts: workers a document may be
    given before its questions get error lines.
    """

    def __init__(self, options: RunOptions, *, workers: int | None = None, address: str | None = None,
                 describe: Callable[[BaseException], str] = describe_error, max_attempts: int = MAX_ATTEMPTS):
        if workers is not None and workers < 1:
            raise InvalidValue("workers", workers, "at least 1")
        import_ray()  # without Ray, fail before anything loads
        self.options, self.describe, self.address = options, describe, address
        self.requested_workers, self.max_attempts = workers, max_attempts
        self.workers = workers or 1
        self.slots: list[Slot] = []

    # -- the cluster ----------------------------------------------------------------------------------------------
    def _connect(self, ray) -> bool:
        """Join or start Ray unless this process already has; whether this call started it."""
        if ray.is_initialized():
            return False
        arguments = dict(address=self.address, logging_level=logging.ERROR, log_to_driver=False)
        if self.address is None and not os.environ.get("RAY_ADDRESS"):
            arguments["include_dashboard"] = False
        try:
            ray.init(**arguments)
        except (ConnectionError, RuntimeError, ValueError) as error:
            where = self.address or os.environ.get("RAY_ADDRESS") or "a local Ray"
            raise UserError(f"cannot start or join the Ray cluster at {where}: {' '.join(str(error).split())}") \
                from None
        return True

    def _actor_options(self, ray) -> tuple[dict, RunOptions]:
        """The resources of one actor and the options its model loads with; sets ``self.workers``."""
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        node_cpus = [int(node["Resources"].get("CPU", 0)) for node in ray.nodes() if node.get("Alive")]
        on_gpus = gpus > 0 and self.options.device != "cpu"
        workers = self.requested_workers or (gpus if on_gpus else max(1, len(node_cpus)))
        options = self.options
        if on_gpus:
            if workers > gpus:
                raise InvalidValue("workers", workers, f"at most {gpus}: one worker per GPU of the cluster")
            if options.device != "auto":  # each actor sees only its own GPU
                options = replace(options, device="cuda")
            actor = {"num_gpus": 1, "num_cpus": 1}
        else:
            if workers > max(cpus, 1):
                raise InvalidValue("workers", workers, f"at most {cpus}: the cluster's CPUs")
            # the most CPUs per actor such that the nodes hold every actor
            share = next((share for share in range(max(node_cpus, default=1), 0, -1)
                          if sum(count // share for count in node_cpus) >= workers), 1)
            actor = {"num_cpus": share}
        self.workers = workers
        return actor, options

    # -- the run --------------------------------------------------------------------------------------------------
    def run(self, tasks: list[Task], recorder: Recorder) -> None:
        ray = import_ray()
        recorder.status("Starting Ray...")
        started_here = self._connect(ray)
        try:
            self._run(ray, tasks, recorder)
        finally:
            for slot in self.slots:
                ray.kill(slot.actor)
            self.slots = []
            if started_here:
                ray.shutdown()

    def _run(self, ray, tasks: list[Task], recorder: Recorder) -> None:
        from ray.exceptions import RayActorError

        actor_resources, options = self._actor_options(ray)
        recorder.summary.workers = self.workers
        worker_class = ray.remote(BatchWorker).options(**actor_resources)
        started = 0

        def start() -> Slot:
            nonlocal started
            started += 1
            actor = worker_class.remote(options, describe=self.describe)
            return Slot(started, actor, loading=actor.load.remote())

        recorder.status(f"Loading the model on {ray_workers(self.workers)}...")
        self.slots = [start() for _ in range(self.workers)]
        restarts_left = self.workers * self.max_attempts
        queue = deque(tasks)

        def lost(slot: Slot) -> None:
            """``slot``'s actor died (while loading the model when it had no task yet): its unanswered questions go back
            to the queue (or fail), a new actor comes."""
            nonlocal restarts_left
            self.slots.remove(slot)
            task = slot.task
            if task is None:
                recorder.worker_failed(f"Ray worker {slot.number} died while loading the model")
            else:
                left = tuple((index, question) for _, index, question in slot.pending)
                retry = replace(task, questions=left, attempt=task.attempt + 1)
                if task.attempt < self.max_attempts:
                    recorder.worker_failed(f"Ray worker {slot.number} died on {task.job.document}; its "
                                           f"{len(left)} unanswered question(s) go to another worker")
                    queue.appendleft(retry)
                else:
                    recorder.worker_failed(f"Ray worker {slot.number} died on {task.job.document}, its last try "
                                           f"({task.attempt} workers died on it)")
                    recorder.fail(retry, f"{task.attempt} workers died answering this document; not tried again")
            if restarts_left > 0:
                restarts_left -= 1
                self.slots.append(start())

        while True:
            for slot in [slot for slot in self.slots if slot.idle]:
                while queue and slot.task is None:
                    task = queue.popleft()
                    document = read_document(task, self.options, recorder, self.describe)
                    if document is not None:
                        slot.actor.open.remote(task.job, document, len(task.questions))
                        slot.task = task
                        slot.pending = [(slot.actor.answer.remote(index, question), index, question)
                                        for index, question in task.questions]
            if not self.slots:
                while queue:
                    recorder.fail(queue.popleft(), "every Ray worker died; no worker is left to answer")
            waiting = {slot.loading if slot.loading is not None else slot.pending[0][0]: slot
                       for slot in self.slots if not slot.idle}
            if not waiting:
                return
            recorder.status(f"{recorder.summary.documents_done} of {recorder.summary.documents} documents on "
                            f"{ray_workers(len(self.slots))}...")
            (ready, *_), _ = ray.wait(list(waiting), num_returns=1)
            slot = waiting[ready]
            if slot.loading is not None:
                try:
                    problem = ray.get(ready)
                except RayActorError:
                    lost(slot)
                    continue
                if problem is not None:
                    raise UserError(problem)
                slot.loading = None
                continue
            try:
                line = ray.get(ready)
            except RayActorError:
                lost(slot)
                continue
            slot.pending.pop(0)
            recorder.line(line)
            if not slot.pending:
                slot.task = None
