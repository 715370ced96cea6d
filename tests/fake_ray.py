"""An in-process stand-in for the part of Ray that ``snapkv_cli.batch.ray_executor`` uses, for tests of the executor's
own logic (which actors it asks for, how it hands out documents, what it does when an actor dies) in well under a
second each, without a Ray cluster. ``tests/test_batch_ray.py`` also runs the executor on a real local Ray.

What it keeps of Ray's contract (https://docs.ray.io/en/latest/ray-core/actors.html):

- ``ray.remote(cls).options(**resources).remote(*args)`` makes an actor; its methods are called with
  ``handle.method.remote(*args)``, which returns a reference at once. An actor runs its calls one at a time, in the
  order they were made; its constructor runs before them.
- ``ray.wait(refs, num_returns=1)`` returns ``([ready], [the rest])``; ``ray.get(ref)`` its value, or raises
  :class:`ray.exceptions.RayActorError` when the actor died before finishing that call.
- ``ray.kill(handle)`` ends an actor: the calls it has not finished fail as above. An actor whose process dies (here: a
  call raises :class:`ActorDied`, as a worker that calls ``os._exit`` would) fails the same way.

Calls run lazily, when ``wait`` or ``get`` needs their result: ``wait`` completes a reference of the actor it served
longest ago (the first such one in the order given), so actors take turns as busy ones would, the order is the same
in every run, and a kill between two calls of one actor lands between them. A loop that waits without end fails
after ``max_waits`` calls instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ray.exceptions import RayActorError


class ActorDied(BaseException):
    """Raised inside an actor's method: its process dies there (a crash, ``os._exit``)."""


class _Died(RayActorError):
    def __init__(self, number: int):
        Exception.__init__(self, f"actor {number} died")


@dataclass
class Actor:
    number: int
    cls: type
    options: dict
    args: tuple
    kwargs: dict
    log: list  # the cluster's calls, of every actor: (actor number, method, args)
    instance: object = None
    dead: bool = False
    served: int = 0  # the wait that last returned one of its results
    queue: list = field(default_factory=list)  # refs not run yet, in call order

    @property
    def calls(self) -> list[tuple]:
        """(method, args) of every call made to this actor, in order."""
        return [(method, args) for number, method, args in self.log if number == self.number]

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)


@dataclass
class _Method:
    actor: Actor
    name: str

    def remote(self, *args, **kwargs) -> Ref:
        ref = Ref(self.actor, self.name, args, kwargs)
        self.actor.log.append((self.actor.number, self.name, args))
        if self.actor.dead:  # as in Ray, a call to a dead actor fails
            ref.done, ref.error = True, _Died(self.actor.number)
        else:
            self.actor.queue.append(ref)
        return ref


class Ref:
    def __init__(self, actor: Actor, method: str, args: tuple, kwargs: dict):
        self.actor, self.method, self.args, self.kwargs = actor, method, args, kwargs
        self.done, self.value, self.error = False, None, None

    def __repr__(self) -> str:
        return f"Ref(actor {self.actor.number}.{self.method})"


class _ActorClass:
    def __init__(self, ray: FakeRay, cls: type, options: dict):
        self.ray, self.cls, self.resources = ray, cls, options

    def options(self, **resources) -> _ActorClass:
        return _ActorClass(self.ray, self.cls, resources)

    def remote(self, *args, **kwargs) -> Actor:
        actor = Actor(len(self.ray.actors) + 1, self.ray.worker or self.cls, self.resources, args, kwargs,
                      self.ray.calls)
        self.ray.actors.append(actor)
        return actor


class FakeRay:
    """A cluster of ``nodes`` (each ``(CPUs, GPUs)`` or ``(CPUs, GPUs, alive)``; a node that has just died still
    counts in the totals, as in Ray). ``initialized``: whether this process has joined it already; ``init_error``:
    what ``init`` raises; ``worker``: a class that replaces the one the executor makes actors of."""

    def __init__(self, *nodes: tuple, initialized: bool = False, init_error: BaseException | None = None,
                 worker: type | None = None, max_waits: int = 10_000):
        self.node_list = [{"Alive": alive[0] if alive else True,  # as Ray, resources it has none of are left out
                           "Resources": {**({"CPU": cpus} if cpus else {}), **({"GPU": gpus} if gpus else {})}}
                          for cpus, gpus, *alive in nodes]
        self.initialized, self.init_error, self.worker = initialized, init_error, worker
        self.init_calls: list[dict] = []
        self.shutdowns = 0
        self.actors: list[Actor] = []
        self.calls: list[tuple] = []  # (actor number, method, args) of every actor's calls, in the order made
        self.killed: list[int] = []
        self.waits, self.max_waits = 0, max_waits

    # -- the cluster
    def cluster_resources(self) -> dict:
        total: dict = {}
        for node in self.node_list:
            for name, count in node["Resources"].items():
                total[name] = total.get(name, 0) + count
        return total

    def nodes(self) -> list[dict]:
        return self.node_list

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, **arguments) -> None:
        self.init_calls.append(arguments)
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def shutdown(self) -> None:
        self.shutdowns += 1
        self.initialized = False

    # -- actors
    def remote(self, cls: type) -> _ActorClass:
        return _ActorClass(self, cls, {})

    def kill(self, actor: Actor, *, no_restart: bool = True) -> None:
        self.killed.append(actor.number)
        self._die(actor)

    def _die(self, actor: Actor) -> None:
        actor.dead = True
        for ref in actor.queue:
            ref.done, ref.error = True, _Died(actor.number)
        actor.queue.clear()

    def _run_until(self, ref: Ref) -> None:
        """Run ``ref``'s actor's calls in order up to ``ref``."""
        actor = ref.actor
        while not ref.done:
            call = actor.queue.pop(0)
            try:
                if actor.instance is None:
                    actor.instance = actor.cls(*actor.args, **actor.kwargs)
                call.value = getattr(actor.instance, call.method)(*call.args, **call.kwargs)
                call.done = True
            except ActorDied:
                call.done, call.error = True, _Died(actor.number)
                self._die(actor)

    def wait(self, refs: list, *, num_returns: int = 1) -> tuple[list, list]:
        assert num_returns == 1, "the stand-in waits for one result at a time"
        assert refs, "ray.wait on no references"
        self.waits += 1
        if self.waits > self.max_waits:
            raise AssertionError(f"{self.max_waits} calls of ray.wait: the loop does not end")
        first = min(refs, key=lambda ref: ref.actor.served)  # min keeps the first of equals
        self._run_until(first)
        first.actor.served = self.waits
        return [first], [ref for ref in refs if ref is not first]

    def get(self, ref: Ref):
        self._run_until(ref)
        if ref.error is not None:
            raise ref.error
        return ref.value
