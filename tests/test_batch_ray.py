"""``snapkv batch --ray``: the same lines as a run in one process, and every answer exactly once when an actor dies in
the middle of a document, a document kills every actor given it, or no actor is left.

Each case runs twice: on a local Ray cluster (2 CPUs, 2 actors, a tiny model), and on the in-process stand-in of
``tests/fake_ray.py``, which also shows which actors the executor asked for, what it gave each and what it ended
(under a second a case, where the cluster takes 20-30 s). Ray comes with the test extra, so these tests always run.
Each actor runs one thread, like the in-process run here, so the floating-point work and so the answers are the
very same.
"""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path

import pytest
import ray

from snapkv_cli.answering.runner import RunOptions
from snapkv_cli.batch.driver import run_batch
from snapkv_cli.batch.jobs import Job
from snapkv_cli.batch.lines import describe_error, error_line
from snapkv_cli.batch.local import LocalExecutor
from snapkv_cli.batch.output import AnswerFile, StreamOutput
from snapkv_cli.batch.presenter import BatchPresenter
from snapkv_cli.batch.ray_executor import RayExecutor
from snapkv_cli.engine import CompressionSettings
from snapkv_cli.generation import GenerationOptions
from tests.fake_ray import ActorDied, FakeRay
from tests.test_batch import NOTES, QUESTIONS, comparable, jsonl

pytestmark = pytest.mark.usefixtures("one_thread")
# A Ray batch that waits forever (an actor that is never scheduled, an answer never asked for) is one a user would
# watch forever: each test here fails after this long instead (a passing one takes under 30 s on 2 busy cores).
DEADLINE_S = 120


@pytest.fixture(autouse=True)
def finishes_in_time(deadline):
    deadline(DEADLINE_S)


@pytest.fixture(scope="module")
def cluster():
    """A local Ray with 2 CPUs for this module (the executor joins it rather than starting its own)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> list[Job]:
    folder = tmp_path_factory.mktemp("ray-corpus")
    jobs = []
    for number in range(6):
        path = folder / f"log{number}.txt"
        path.write_text(NOTES.replace("117", str(300 + number)).replace("Tuesday", ["Monday", "Friday"][number % 2]))
        jobs.append(Job(f"log{number}", str(path), tuple(QUESTIONS)))
    return jobs


@pytest.fixture(scope="module")
def options(tiny_model_path) -> RunOptions:
    return RunOptions(model=tiny_model_path, device="cpu",
                      settings=CompressionSettings(window_size=16, max_capacity_prompt=48, kernel_size=15,
                                                   pooling="maxpool"),
                      generation=GenerationOptions(max_new_tokens=12))


@pytest.fixture(scope="module")
def local_lines(jobs, options) -> dict:
    """The lines of the run in one process, by (id, question)."""
    import io

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        stream = io.StringIO()
        summary = run_batch(jobs, LocalExecutor(options), StreamOutput(stream))
    finally:
        torch.set_num_threads(threads)
    assert summary.answered == 12 and summary.failed == 0
    return {(line["id"], line["question"]): line for line in jsonl(stream.getvalue())}


def same_answer(line: dict, *also: str) -> dict:
    """:func:`comparable`, less the dtype's reason (the dtype itself is compared): Ray's actors are other processes,
    where the test session's pin of the CPU's bfloat16 detection (tests/conftest.py) does not reach, so they give this
    machine's own reason."""
    return comparable(line, "dtype_reason", *also)


def assert_same_lines(lines: list[dict], local_lines: dict) -> None:
    keys = [(line["id"], line["question"]) for line in lines]
    assert sorted(keys) == sorted(local_lines)  # every answer, exactly once
    for line in lines:
        alone = local_lines[(line["id"], line["question"])]
        ignored = ("prefix", "reused_prefix_tokens")
        assert same_answer(line, *ignored) == same_answer(alone, *ignored)


def test_two_actors_answer_like_one_process(cluster, jobs, options, local_lines, tmp_path):
    out = AnswerFile(str(tmp_path / "ray.jsonl"))
    executor, presenter = RayExecutor(options, workers=2), WorkerMessages()
    summary = run_batch(jobs, executor, out, presenter)
    out.close()
    assert presenter.said[:2] == ["Starting Ray...", "Loading the model on 2 Ray workers..."]
    assert "0 of 6 documents on 2 Ray workers..." in presenter.said
    assert executor.slots == [] and presenter.messages == []
    lines = jsonl((tmp_path / "ray.jsonl").read_text())
    assert_same_lines(lines, local_lines)
    for line in lines:  # nothing was lost: each document was prefilled once for both questions, as in one process
        assert same_answer(line) == same_answer(local_lines[(line["id"], line["question"])])
    assert (summary.workers, summary.answered, summary.failed, summary.worker_failures) == (2, 12, 0, 0)
    assert summary.documents_done == 6


class WorkerMessages(BatchPresenter):
    """Collects what the batch says of its workers that died, and its progress."""

    def __init__(self):
        self.messages: list[str] = []
        self.said: list[str] = []

    def worker_failed(self, message: str, summary) -> None:
        self.messages.append(message)

    def progress(self, message: str) -> None:
        self.said.append(message)


class Kill(WorkerMessages):
    """Kills the actor that has just answered a document's first question, while its second is on the way, on each
    of the first ``times`` documents answered (with ``kill``: Ray's, or a stand-in's). ``killed``: those documents;
    ``workers``: the numbers of the actors killed.

    On a real cluster the second answer may be done already when the kill lands (the actor does not wait for the
    driver to read the first): then the actor's death shows only when it is given its next document."""

    def __init__(self, times: int, kill=ray.kill):
        super().__init__()
        self.executor: RayExecutor | None = None
        self.times, self.kill, self.killed, self.workers = times, kill, [], []

    def recorded(self, line: dict, summary) -> None:
        if len(self.killed) < self.times and line.get("question_index") == 0 and line["id"] not in self.killed:
            slot = next((slot for slot in self.executor.slots if slot.task and slot.task.job.id == line["id"]), None)
            if slot is not None:
                self.kill(slot.actor, no_restart=True)
                self.killed.append(line["id"])
                self.workers.append(slot.number)


def test_killed_actors_lose_no_answer_and_duplicate_none(cluster, jobs, options, local_lines, tmp_path):
    """Two actors killed, each in the middle of a document: every answer is there exactly once, and the summary
    counts both deaths."""
    path = tmp_path / "ray.jsonl"
    out = AnswerFile(str(path))
    presenter = Kill(times=2)
    presenter.executor = RayExecutor(options, workers=2)
    summary = run_batch(jobs, presenter.executor, out, presenter)
    out.close()
    assert len(presenter.killed) == 2
    lines = jsonl(path.read_text())
    assert_same_lines(lines, local_lines)
    assert summary.answered == 12 and summary.failed == 0
    assert summary.worker_failures == 2 and len(presenter.messages) == 2, presenter.messages
    # each killed actor's death is told once, with the document it died on: the one it was killed in the middle of
    # (its second question left), or, where that answer was done already, the next one it was given (both left)
    documents = {job.id: job.document for job in jobs}
    told = [re.fullmatch(r"Ray worker (\d+) died on (.+); its ([12]) unanswered question\(s\) go to another worker",
                         message) for message in presenter.messages]
    assert all(told), presenter.messages
    assert sorted(int(match[1]) for match in told) == sorted(presenter.workers)
    for match in told:
        killed = presenter.killed[presenter.workers.index(int(match[1]))]
        assert (match[2] == documents[killed]) == (match[3] == "1"), presenter.messages
        if match[3] == "1":
            # the question given to another worker is that document's only one there: prefilled in one pass, as ask
            # does, so no prefix of its own is timed
            retried = next(line for line in lines if line["id"] == killed and line["question_index"] == 1)
            assert retried["prefix"]["seconds"] == 0.0
    # a rerun finds nothing left to do
    again = AnswerFile(str(path))
    assert len(again.answered) == 12
    again.close()


def test_the_command_on_ray(cluster, jobs, options, local_lines, tiny_model_path):
    """``snapkv batch --ray --workers 2`` (joining the Ray this process runs): the same lines, the summary on
    stderr, and an error line for a document that cannot be read."""
    from typer.testing import CliRunner

    import snapkv_cli.cli as cli

    documents = [job.document for job in jobs[:2]]
    result = CliRunner().invoke(cli.app, ["batch", *documents, jobs[0].document + ".missing", "-Q", QUESTIONS[0],
                                          "-Q", QUESTIONS[1], "--model", tiny_model_path, "--device", "cpu",
                                          "--method", "snapkv", "--budget", "48", "--window", "16",
                                          "--max-new-tokens", "12", "--ray", "--workers", "2"])
    assert result.exit_code == 1, (result.stderr, result.exception)
    lines = jsonl(result.stdout)
    answers = [line for line in lines if "error" not in line]
    by_path = {job.document: job.id for job in jobs}
    assert sorted((by_path[line["id"]], line["question"]) for line in answers) == sorted(
        key for key in local_lines if key[0] in ("log0", "log1"))
    for line in answers:
        assert same_answer(line, "id") == same_answer(local_lines[(by_path[line["id"]], line["question"])], "id")
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 2 and all("file not found" in line["error"] for line in errors)
    stderr = " ".join(result.stderr.split())
    assert "questions │ 4 answered, 2 failed" in stderr and "workers │ 2, 0 died" in stderr


def test_a_document_that_kills_every_worker_fails_after_max_attempts(cluster, jobs, options, tmp_path):
    """A document on which every actor dies is given to exactly ``max_attempts`` actors; then each of its unanswered
    questions gets an error line, and the other documents are answered as usual."""
    import os

    from snapkv_cli.errors import PromptTooLong

    driver = os.getpid()

    def describe_or_die(error: BaseException) -> str:  # nested, so Ray pickles it by value into the actors
        if isinstance(error, PromptTooLong) and os.getpid() != driver:
            os._exit(1)  # the actor's process dies as a crashed worker would
        from snapkv_cli.batch.lines import describe_error

        return describe_error(error)

    fatal = tmp_path / "fatal.txt"
    fatal.write_text(NOTES * 60)  # longer than the tiny model's context: its prompt cannot be built
    batch = [Job("fatal", str(fatal), tuple(QUESTIONS)), *jobs[:2]]
    out, presenter = StreamOutput(io.StringIO()), WorkerMessages()
    summary = run_batch(batch, RayExecutor(options, workers=2, describe=describe_or_die, max_attempts=2), out,
                        presenter)
    lines = jsonl(out.stream.getvalue())
    fatal_lines = [line for line in lines if line["id"] == "fatal"]
    assert [line["question"] for line in fatal_lines] == list(QUESTIONS)
    assert all(line["error"] == "2 workers died answering this document; not tried again" for line in fatal_lines)
    assert summary.worker_failures == 2 and len(presenter.messages) == 2, presenter.messages
    assert "its last try (2 workers died on it)" in presenter.messages[1]
    assert summary.answered == 4 and summary.failed == 2


def test_a_model_that_cannot_load_stops_a_ray_batch(cluster, jobs, options, tmp_path):
    """An actor that cannot load the model stops the batch with the reason, before any line (as a local run)."""
    from dataclasses import replace

    from snapkv_cli.errors import UserError

    missing = str(tmp_path / "no-model")
    out, presenter = StreamOutput(io.StringIO()), WorkerMessages()
    with pytest.raises(UserError) as caught:
        run_batch(jobs[:2], RayExecutor(replace(options, model=missing), workers=1), out, presenter)
    assert missing in str(caught.value) and out.stream.getvalue() == ""
    assert presenter.said[:2] == ["Starting Ray...", "Loading the model on 1 Ray worker..."]


def test_when_every_actor_has_died_the_rest_fails(cluster, jobs, options, tmp_path):
    """Actors that die while loading the model are replaced (``workers`` x ``max_attempts`` times in all); once
    none is left, every question still to answer gets an error line saying so, and the deaths are counted."""
    import os
    from dataclasses import replace

    driver = os.getpid()
    missing = str(tmp_path / "no-model")

    def describe_or_die(error: BaseException) -> str:  # nested, so Ray pickles it by value into the actors
        if os.getpid() != driver:
            os._exit(1)  # the actor's process dies as a crashed worker would
        return str(error)

    out, presenter = StreamOutput(io.StringIO()), WorkerMessages()
    executor = RayExecutor(replace(options, model=missing), workers=1, describe=describe_or_die, max_attempts=2)
    summary = run_batch(jobs[:2], executor, out, presenter)
    lines = jsonl(out.stream.getvalue())
    assert [(line["id"], line["question"]) for line in lines] == [
        (job.id, question) for job in jobs[:2] for question in job.questions]
    assert all(line["error"] == "every Ray worker died; no worker is left to answer" for line in lines)
    assert presenter.messages == [f"Ray worker {number} died while loading the model" for number in (1, 2, 3)]
    assert (summary.worker_failures, summary.failed, summary.answered, summary.documents_done) == (3, 4, 0, 2)


# ------------------------------------------------------------------------- the same cases on the in-process stand-in
@pytest.fixture
def stand_in(monkeypatch):
    """Makes a :class:`~tests.fake_ray.FakeRay` (a local one of 2 CPUs unless nodes are given) the ``ray`` the
    executor imports."""

    def make(*nodes, **options) -> FakeRay:
        fake = FakeRay(*(nodes or [(2, 0)]), **options)
        monkeypatch.setitem(sys.modules, "ray", fake)
        return fake

    return make


def calls_by_actor(fake: FakeRay) -> list[list[str]]:
    return [[name for name, _ in actor.calls] for actor in fake.actors]


def test_stand_in_two_actors_answer_like_one_process(stand_in, jobs, options, local_lines, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake = stand_in()
    out, presenter = StreamOutput(io.StringIO()), WorkerMessages()
    executor = RayExecutor(options, workers=2)
    summary = run_batch(jobs, executor, out, presenter)
    lines = jsonl(out.stream.getvalue())
    for line in lines:  # every answer once, each document prefilled once for both questions, as in one process
        assert same_answer(line) == same_answer(local_lines[(line["id"], line["question"])])
    assert len(lines) == len(local_lines)
    # a Ray of its own, quiet, ended with the run; two actors of one CPU each on the 2-CPU node, each made with the
    # run's options, loading the model first, then taking a document and its two questions at a time
    assert fake.init_calls == [{"address": None, "logging_level": logging.ERROR, "log_to_driver": False,
                                "include_dashboard": False}]
    assert fake.shutdowns == 1 and not fake.initialized
    assert [(actor.options, actor.args, actor.kwargs) for actor in fake.actors] == [
        ({"num_cpus": 1}, (options,), {"describe": describe_error})] * 2
    for names in calls_by_actor(fake):
        assert names[0] == "load" and names[1:] == ["open", "answer", "answer"] * ((len(names) - 1) // 3)
    assert sorted(len(names) for names in calls_by_actor(fake)) == [1 + 3 * 3] * 2  # three documents each
    given = [(args[0].id, args[1].text, args[2]) for actor in fake.actors for name, args in actor.calls
             if name == "open"]
    assert sorted(given) == sorted((job.id, Path(job.document).read_text().strip(), 2) for job in jobs)
    answers = [args for actor in fake.actors for name, args in actor.calls if name == "answer"]
    assert sorted(answers) == sorted((index, question) for _ in jobs for index, question in enumerate(QUESTIONS))
    assert fake.killed == [1, 2] and executor.slots == []
    # what the user is told while it runs
    assert presenter.said[:2] == ["Starting Ray...", "Loading the model on 2 Ray workers..."]
    assert [message for message in presenter.said if message.startswith("Reading ")] == [
        f"Reading {job.document}..." for job in jobs]
    done = [int(message.split()[0]) for message in presenter.said if message.endswith(" documents on 2 Ray workers...")]
    assert done[0] == 0 and done == sorted(done) and done[-1] == 5 and presenter.messages == []
    assert all(message.endswith(" of 6 documents on 2 Ray workers...") for message in presenter.said
               if message[0].isdigit())
    assert (summary.workers, summary.answered, summary.failed, summary.worker_failures, summary.documents_done) == (
        2, 12, 0, 0, 6)


def test_stand_in_a_ray_joined_already_is_left_running(stand_in, jobs, options):
    fake = stand_in(initialized=True)
    summary = run_batch(jobs[:1], RayExecutor(options, workers=1), StreamOutput(io.StringIO()))
    assert fake.init_calls == [] and fake.shutdowns == 0 and fake.initialized
    assert fake.killed == [1] and summary.answered == 2  # its actors are ended all the same


def test_stand_in_killed_actors_lose_no_answer_and_duplicate_none(stand_in, jobs, options, local_lines):
    fake = stand_in()
    failed_at = []  # where in the cluster's calls the executor learnt of each death

    class KillAndMark(Kill):
        def worker_failed(self, message: str, summary) -> None:
            super().worker_failed(message, summary)
            failed_at.append(len(fake.calls))

    presenter = KillAndMark(times=2, kill=fake.kill)
    presenter.executor = RayExecutor(options, workers=2)
    out = StreamOutput(io.StringIO())
    summary = run_batch(jobs, presenter.executor, out, presenter)
    lines = jsonl(out.stream.getvalue())
    assert_same_lines(lines, local_lines)
    assert len(presenter.killed) == 2 and (summary.answered, summary.failed, summary.worker_failures) == (12, 0, 2)
    documents = {job.id: job.document for job in jobs}
    # each killed actor is named with its document, and a fresh one (3, then 4) takes its place
    assert presenter.messages == [f"Ray worker {number} died on {documents[killed]}; its 1 unanswered question(s) go "
                                  "to another worker" for number, killed in zip(fake.killed[:2], presenter.killed)]
    assert [actor.number for actor in fake.actors] == [1, 2, 3, 4]
    # the question left goes to another worker, before any document not started yet, and that worker prefills
    # its document for that one question (no prefix)
    for killed, mark in zip(presenter.killed, failed_at):
        next_open = next(args[0].id for _, name, args in fake.calls[mark:] if name == "open")
        assert next_open == killed
        takers = [actor.number for actor in fake.actors for name, args in actor.calls
                  if name == "open" and args[0].id == killed]
        assert len(takers) == 2 and takers[0] in fake.killed[:2] and takers[1] not in fake.killed[:2]
        retried = next(line for line in lines if line["id"] == killed and line["question_index"] == 1)
        assert retried["prefix"]["seconds"] == 0.0
    assert sorted(fake.killed[2:]) == [3, 4]  # the survivors, ended with the run (the dead ones are gone)


@pytest.mark.parametrize("max_attempts", [1, 2, 3])
def test_stand_in_a_document_that_kills_every_worker_is_tried_max_attempts_times(stand_in, jobs, options, tmp_path,
                                                                                 max_attempts):
    from snapkv_cli.errors import PromptTooLong

    def describe_or_die(error: BaseException) -> str:
        if isinstance(error, PromptTooLong):
            raise ActorDied  # the actor's process dies as a crashed worker would
        return describe_error(error)

    fake = stand_in()
    fatal = tmp_path / "fatal.txt"
    fatal.write_text(NOTES * 60)  # longer than the tiny model's context: its prompt cannot be built
    batch = [Job("fatal", str(fatal), tuple(QUESTIONS)), *jobs[:2]]
    out, presenter = StreamOutput(io.StringIO()), WorkerMessages()
    summary = run_batch(batch, RayExecutor(options, workers=2, describe=describe_or_die, max_attempts=max_attempts),
                        out, presenter)
    lines = jsonl(out.stream.getvalue())
    fatal_lines = [line for line in lines if line["id"] == "fatal"]
    assert [line["question"] for line in fatal_lines] == list(QUESTIONS)
    assert all(line["error"] == f"{max_attempts} workers died answering this document; not tried again"
               for line in fatal_lines)
    opened = [actor.number for actor in fake.actors for name, args in actor.calls if name == "open"
              and args[0].id == "fatal"]
    assert len(opened) == len(set(opened)) == max_attempts  # each try on another actor
    assert presenter.messages == [
        *[f"Ray worker {number} died on {fatal}; its 2 unanswered question(s) go to another worker"
          for number in opened[:-1]],
        f"Ray worker {opened[-1]} died on {fatal}, its last try ({max_attempts} workers died on it)"]
    assert (summary.worker_failures, summary.answered, summary.failed) == (max_attempts, 4, 2)


def test_stand_in_a_model_that_cannot_load_stops_the_batch(stand_in, jobs, options, tmp_path):
    from dataclasses import replace

    from snapkv_cli.errors import UserError

    fake = stand_in()
    missing = str(tmp_path / "no-model")
    out, presenter = StreamOutput(io.StringIO()), WorkerMessages()
    with pytest.raises(UserError) as caught:
        run_batch(jobs[:2], RayExecutor(replace(options, model=missing), workers=1), out, presenter)
    assert missing in str(caught.value) and out.stream.getvalue() == ""
    assert presenter.said == ["Starting Ray...", "Loading the model on 1 Ray worker...",
                              "0 of 2 documents on 1 Ray worker..."]
    assert fake.killed == [1] and fake.shutdowns == 1  # the actor and the Ray started for the run are ended


@pytest.mark.parametrize("workers, max_attempts", [(1, 2), (2, 1)])
def test_stand_in_when_every_actor_has_died_the_rest_fails(stand_in, jobs, options, tmp_path, workers, max_attempts):
    from dataclasses import replace

    def die(error: BaseException) -> str:
        raise ActorDied

    fake = stand_in()
    executor = RayExecutor(replace(options, model=str(tmp_path / "no-model")), workers=workers, describe=die,
                           max_attempts=max_attempts)
    out, presenter = StreamOutput(io.StringIO()), WorkerMessages()
    summary = run_batch(jobs[:2], executor, out, presenter)
    lines = jsonl(out.stream.getvalue())
    assert [(line["id"], line["question"]) for line in lines] == [
        (job.id, question) for job in jobs[:2] for question in job.questions]
    assert all(line["error"] == "every Ray worker died; no worker is left to answer" for line in lines)
    started = workers * (1 + max_attempts)  # the first ones, and workers x max_attempts in their places
    assert presenter.messages == [f"Ray worker {number} died while loading the model"
                                  for number in range(1, started + 1)]
    assert [actor.number for actor in fake.actors] == list(range(1, started + 1))
    assert (summary.worker_failures, summary.failed, summary.answered, summary.documents_done) == (started, 4, 0, 2)


@pytest.mark.parametrize("describe", [None, lambda error: f"described: {error}"])
def test_stand_in_a_document_that_cannot_be_read_is_failed_on_the_driver(stand_in, jobs, options, describe):
    """Its questions get error lines, worded by the executor's ``describe`` (by default the error's own message)."""
    fake = stand_in()
    missing = jobs[0].document + ".missing"
    batch = [Job("gone", missing, tuple(QUESTIONS)), *jobs[:2]]
    out = StreamOutput(io.StringIO())
    executor = RayExecutor(options, workers=2, **({"describe": describe} if describe else {}))
    summary = run_batch(batch, executor, out)
    lines = jsonl(out.stream.getvalue())
    message = f"file not found: '{missing}'; check the path and spelling"
    assert [(line["question"], line["error"]) for line in lines if line["id"] == "gone"] == [
        (question, f"described: {message}" if describe else message) for question in QUESTIONS]
    assert not any(args[0].id == "gone" for actor in fake.actors for name, args in actor.calls if name == "open")
    assert (summary.answered, summary.failed, summary.documents_done) == (4, 2, 3)


class StandInWorker:
    """Answers every question with an error line naming the device it was given (no model)."""

    def __init__(self, options: RunOptions, *, describe):
        self.device = options.device

    def load(self) -> None:
        return None

    def open(self, job: Job, document, questions: int) -> None:
        self.job = job

    def answer(self, index: int, question: str) -> dict:
        return error_line(self.job, index, question, f"on {self.device}")


@pytest.mark.parametrize("nodes, device, expected", [
    ([(16, 2)], "cuda:1", (2, {"num_gpus": 1, "num_cpus": 1}, "cuda")),  # each actor sees only its own GPU
    ([(16, 2)], "auto", (2, {"num_gpus": 1, "num_cpus": 1}, "auto")),
    ([(8, 0), (4, 0)], "auto", (2, {"num_cpus": 4}, "auto"))])
def test_stand_in_actors_get_the_resources_and_device_chosen(stand_in, jobs, options, nodes, device, expected):
    from dataclasses import replace

    fake = stand_in(*nodes, worker=StandInWorker)
    out = StreamOutput(io.StringIO())
    summary = run_batch(jobs[:3], RayExecutor(replace(options, device=device)), out)
    workers, resources, given = expected
    assert summary.workers == workers and len(fake.actors) == workers
    assert all(actor.options == resources for actor in fake.actors)
    assert {line["error"] for line in jsonl(out.stream.getvalue())} == {f"on {given}"}
