"""Mutation testing of the modules whose tests must catch wrong code, with mutmut, one module at a time.

    .venv/bin/python -m tools.bench.mutation --install     # once: mutmut (pinned) into this venv
    flock /tmp/snapkv-heavy.lock .venv/bin/python -m tools.bench.mutation tasks engine session generation
    .venv/bin/python -m tools.bench.mutation --report      # docs/results/mutation/*.json -> docs/testing.md's table
    .venv/bin/python -m tools.bench.mutation engine --collect   # a run stopped part way: its JSON
                                                           # (unfinished = "not checked")
    .venv/bin/python -m tools.bench.mutation engine --resume    # later, on another machine: test only those

Each module runs in a scratch copy of the tracked files (``--work``, default ``/tmp/snapkv-mutation/<module>``), so
the work tree stays clean, against only the fast test files that exercise it (``test_files`` below); mutmut further
runs, for each mutant, only the tests that called the mutated function (it records that in a first pass) and stops
at the first failure (fastest tests first). The counts and every surviving mutant's diff go to
``docs/results/mutation/<module>.json``; ``--report`` rewrites the generated table between the markers in
``docs/testing.md``. mutmut is not a project
dependency: it is installed into the venv only by ``--install``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tools import ROOT

MUTMUT = "mutmut==3.8.1"
RESULTS = ROOT / "docs" / "results" / "mutation"
TESTING_MD = ROOT / "docs" / "testing.md"
BEGIN, END = "<!-- mutation-table:begin -->", "<!-- mutation-table:end -->"

# module -> (files mutated, the other fast test files that exercise them); the test files named after a mutated
# file, and a mutated package's test folder, are added by test_files()
MODULES: dict[str, tuple[list[str], list[str]]] = {
    "engine": (["snapkv_cli/engine/*"],
               ["tests/test_doc_cache.py", "tests/test_doc_cache_robustness.py", "tests/test_generation.py",
                "tests/test_multi_question.py", "tests/test_session.py", "tests/test_stopping.py"]),
    "generation": (["snapkv_cli/generation/*"], ["tests/test_multi_question.py"]),
    "session": (["snapkv_cli/answering/session.py"],
                 ["tests/test_multi_question.py", "tests/test_doc_cache.py", "tests/test_doc_cache_robustness.py",
                  "tests/test_cli.py", "tests/test_long_documents.py", "tests/test_stopping.py",
                  "tests/test_batch.py"]),
    "tasks": (["snapkv_cli/bench/tasks.py"], ["tests/test_bench.py", "tests/test_docqa.py"]),
    "doc_cache": (["snapkv_cli/doc_cache/*"], ["tests/test_doc_cache.py", "tests/test_doc_cache_robustness.py",
                                             "tests/test_session.py"]),
    "documents_prompting": (["snapkv_cli/answering/documents/*", "snapkv_cli/answering/prompting.py"],
                            ["tests/test_prompt_injection.py", "tests/test_hostile_documents.py",
                             "tests/test_docqa.py"]),
    "batch": (["snapkv_cli/batch/*"], ["tests/test_batch.py", "tests/test_batch_ray.py"]),
    "report_views": (["snapkv_cli/answering/report.py", "snapkv_cli/answering/inspection.py",
                      "snapkv_cli/answering/presenter.py", "snapkv_cli/views/*"],
                     ["tests/test_inspect.py", "tests/test_hostile_misc.py", "tests/test_cli.py",
                      "tests/test_progress.py"]),
    "cli_runner": (["snapkv_cli/cli/*", "snapkv_cli/answering/runner.py", "snapkv_cli/errors.py",
                    "snapkv_cli/defaults.py", "snapkv_cli/paths.py"],
                   ["tests/test_cli.py", "tests/test_cli_structure.py", "tests/test_progress.py",
                    "tests/test_inspect.py", "tests/test_multi_question.py", "tests/test_batch.py",
                    "tests/test_hostile_misc.py", "tests/test_hostile_documents.py", "tests/test_doc_cache.py",
                    "tests/test_usage_doc.py", "tests/test_declarations.py", "tests/test_weight_dtype.py",
                    "tests/test_bench.py", "tests/test_niah.py", "tests/test_models.py", "tests/test_wheels.py",
                    "tests/test_builtin_fetch.py", "tests/test_prompting.py", "tests/test_report.py"]),
    "models": (["snapkv_cli/models/*"],
               ["tests/test_models.py", "tests/test_wheels.py", "tests/test_catalog.py", "tests/test_local_gguf.py",
                "tests/test_builtin_fetch.py", "tests/test_weight_dtype.py", "tests/test_conversion.py"]),
}


def test_files(name: str, root: Path = ROOT) -> list[str]:
    """The test files a group's mutants face: those ``MODULES`` names, and every ``test_<name>.py`` named after a
    mutated file or package, plus a mutated package's own test folder (``tests/engine/`` for
    ``snapkv_cli/engine/*``), so that a test file written for new code is never left out of its group's run."""
    mutated, others = MODULES[name]
    named: list[str] = []
    for pattern in mutated:
        package = Path(pattern.removesuffix("/*")) if pattern.endswith("/*") else None
        stems = [package.name, *(source.stem for source in (root / package).rglob("*.py"))] if package else [
            Path(pattern).stem]
        for stem in stems:
            named += sorted(path.relative_to(root).as_posix() for path in root.glob(f"tests/**/test_{stem}.py"))
        if package:
            folder = root / "tests" / package.relative_to("snapkv_cli")
            named += sorted(path.relative_to(root).as_posix() for path in folder.glob("test_*.py"))
    return [*others, *sorted(set(named) - set(others))]


def group(name: str) -> tuple[list[str], list[str]]:
    """A group's mutated file patterns and the test files its mutants face."""
    return MODULES[name][0], test_files(name)


# mutmut's exit-code meanings, as its results command names them
STATUS_BY_EXIT_CODE = {1: "killed", 3: "killed", 2: "interrupted", -24: "timeout", 24: "timeout", 0: "survived",
                       5: "no tests", 33: "no tests", 34: "skipped", 35: "suspicious", 36: "timeout",
                       37: "caught by type check", -11: "segfault", -9: "segfault", 152: "timeout",
                       255: "timeout", None: "not checked"}
# a status back to an exit code that means it (the first listed), to carry statuses into a resumed run
EXIT_CODE_BY_STATUS = {status: code for code, status in reversed(STATUS_BY_EXIT_CODE.items()) if code is not None}


def install() -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", MUTMUT], check=True)


def mutmut_bin() -> str:
    path = Path(sys.executable).parent / "mutmut"
    if not path.exists():
        sys.exit(f"mutmut is not installed in this venv: run {sys.executable} {__file__} --install")
    return str(path)


def scratch_copy(work: Path) -> None:
    """The tracked files of the work tree (as they are now, uncommitted edits included) in ``work``, over what is
    there: mutmut's ``mutants/`` stays, so a stopped run continues and unchanged functions keep their results."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    if not (work / ".git").exists():  # the bench records the code's commit: the copy is a checkout of its own
        identity = ["-c", "user.name=mutation", "-c", "user.email=mutation@localhost"]
        for command in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-q", "-m", "scratch copy"]):
            subprocess.run(["git", *command], cwd=work, check=True, capture_output=True)


def setup_cfg(mutated: list[str], tests: list[str]) -> str:
    lines = ["[mutmut]", "source_paths=snapkv_cli", "only_mutate=", *[f"    {pattern}" for pattern in mutated],
             "also_copy=", "    tools/", "    examples/", "    prompts/", "    docs/", "    README.md",
             "    CONTRIBUTING.md", "    pyproject.toml",
             "pytest_add_cli_args_test_selection=", *[f"    {test}" for test in tests],
             "pytest_add_cli_args=", "    -m", "    not slow", "    -p", "    no:cacheprovider",
             "timeout_multiplier=5.0",
             # each mutant's tests in a process forked from a server that never ran a test: forked from a process
             # that had (mutmut's default), ray.init finds gRPC's state from before the fork and waits forever
             "process_isolation=forkserver"]
    return "\n".join(lines) + "\n"


def run_module(name: str, work_root: Path, max_children: int, mutants: list[str], results: Path = RESULTS,
               earlier_seconds: float = 0) -> dict:
    mutated, tests = group(name)
    work = work_root / name
    commit = head_commit()  # the code the copy below is taken from
    scratch_copy(work)
    (work / "setup.cfg").write_text(setup_cfg(mutated, tests), encoding="utf-8")
    # SNAPKV_MUTATION_WARMUP: the process mutmut forks each mutant's tests from builds the tiny models once
    # (tests/conftest.py), so that each run does not spend seconds importing transformers' lazy code and building them
    environment = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
                       SNAPKV_MUTATION_WARMUP="1")
    started = time.monotonic()
    command = [mutmut_bin(), "run", "--max-children", str(max_children), *mutants]
    print(f"[{name}] {' '.join(command)} in {work}", flush=True)
    with open(work / "mutmut.log", "w") as log:  # its progress spinner; the summary is printed below
        subprocess.run(command, cwd=work, env=environment, check=False, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started + earlier_seconds
    return collect(name, work, seconds, max_children, results, only=mutants or None, commit=commit)


def resume(name: str, work_root: Path, results: Path = RESULTS) -> float:
    """Carry the statuses of an earlier, unfinished run of ``name`` (its ``<module>.json``, whose unfinished mutants
    say "not checked") into a fresh scratch copy, so that the next ``mutmut run`` tests only those: a module too large
    for one sitting is run over several. Refused when a mutated file or a test file differs from the commit the
    earlier run recorded (mutant names and statuses would not carry over). Returns the earlier run's seconds."""
    earlier = json.loads((results / f"{name}.json").read_text(encoding="utf-8"))
    mutated, tests = group(name)
    changed = subprocess.run(["git", "diff", "--name-only", earlier["commit"], "--", *mutated, *tests], cwd=ROOT,
                             check=True, capture_output=True, text=True).stdout.split()
    if changed:
        sys.exit(f"[{name}] cannot resume: changed since {earlier['commit'][:10]}: {', '.join(changed)}; run it anew")
    count_mutants(name, work_root)  # the mutants and their meta files, as mutmut run would create them
    carried = 0
    for meta in (work_root / name / "mutants").rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        for mutant in data.get("exit_code_by_key", {}):
            status = earlier["statuses"].get(mutant, "not checked")
            if status != "not checked":
                data["exit_code_by_key"][mutant] = EXIT_CODE_BY_STATUS[status]
                carried += 1
        meta.write_text(json.dumps(data))
    print(f"[{name}] resumed: {carried} of {earlier['total']} mutants keep their status from "
          f"{earlier['commit'][:10]}", flush=True)
    return earlier["seconds"]


def carry(name: str, work_root: Path, results: Path = RESULTS, audit: int = 0) -> dict:
    """Prepare a run of ``name`` that tests only the mutants of functions changed or added since its last full run,
    and carries the others' statuses over from it (a file moved, its functions unchanged).

    A mutant is carried where its function (the same name, in the same module or, moved, in the one module that had
    it) has the same source as at the earlier run's commit, so mutmut makes the same mutants of it, numbered alike:
    the rule mutmut applies itself between runs of one checkout. ``audit`` of the carried mutants, drawn at random
    (seeded), are tested again to show the carried statuses still hold. Returns what :func:`note_carried` writes
    into the run's JSON.
    """
    import random

    earlier = json.loads((results / f"{name}.json").read_text(encoding="utf-8"))
    statuses = module_statuses(name, results)
    old_work = work_root / f"{name}-at-{earlier['commit'][:10]}"
    if not (old_work / "mutants").exists():
        old_work.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", earlier["commit"]], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(old_work)], input=archive.stdout, check=True)
        (old_work / "setup.cfg").write_text(setup_cfg(earlier["mutated"], earlier["tests"]), encoding="utf-8")
        subprocess.run([sys.executable, "-c", "from mutmut.__main__ import create_mutants; create_mutants(2)"],
                       cwd=old_work, check=True, capture_output=True)
    shutil.rmtree(work_root / name, ignore_errors=True)  # statuses from an earlier attempt would pass as tested now
    count_mutants(name, work_root)
    metas = {_module(meta, work_root / name / "mutants"): json.loads(meta.read_text())
             for meta in (work_root / name / "mutants").rglob("*.py.meta")}
    carried = carried_mutants(_functions(old_work / "mutants"), metas, statuses)
    audited = sorted(random.Random(0).sample(sorted(carried), min(audit, len(carried))))
    for meta in (work_root / name / "mutants").rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        for mutant in data.get("exit_code_by_key", {}):
            if mutant in carried and mutant not in audited:
                data["exit_code_by_key"][mutant] = EXIT_CODE_BY_STATUS[statuses[carried[mutant]]]
        meta.write_text(json.dumps(data))
    _rename_equivalent(name, carried, {mutant for data in metas.values() for mutant in data["exit_code_by_key"]},
                       results)
    print(f"[{name}] {len(carried)} mutants carried from {earlier['commit'][:10]} ({len(audited)} tested again)",
          flush=True)
    return {"from": earlier["commit"], "mutants": len(carried), "seconds_earlier": earlier["seconds"],
            "audited": {mutant: statuses[carried[mutant]] for mutant in audited}}


def carried_mutants(old_functions: dict[tuple[str, str], tuple[str, int]], metas: dict[str, dict],
                    statuses: dict[str, str]) -> dict[str, str]:
    """Mutant now -> the same mutant at the earlier run, for every mutant not yet tested now (a stopped run's keep
    their own status) whose function has the source it had then (``old_functions``: (module, function) -> (hash,
    mutants), :func:`_functions`), in the same module or, moved, in the one module that had it, with as many
    mutants, and whose earlier status is known (``statuses``). ``metas``: module -> its mutmut meta data now."""
    modules_by_function: dict[tuple[str, str], list[str]] = {}
    for (module, function), (digest, _) in old_functions.items():
        modules_by_function.setdefault((function, digest), []).append(module)
    carried: dict[str, str] = {}
    for module, data in metas.items():
        for function, digest in data.get("hash_by_function_name", {}).items():
            modules = modules_by_function.get((function, digest), [])
            old_module = module if module in modules else modules[0] if len(modules) == 1 else None
            mutants = [key for key in data["exit_code_by_key"] if key.startswith(f"{module}.{function}__mutmut_")]
            if old_module is None or len(mutants) != old_functions[old_module, function][1]:
                continue
            for mutant in mutants:
                old = old_module + mutant[len(module):]
                if data["exit_code_by_key"][mutant] is None and statuses.get(old, "not checked") != "not checked":
                    carried[mutant] = old
    return carried


def _module(meta: Path, mutants: Path) -> str:
    """The dotted module of a mutmut ``*.py.meta`` file under ``mutants``."""
    return str(meta.relative_to(mutants))[:-len(".py.meta")].replace("/", ".").removesuffix(".__init__")


def _functions(mutants: Path) -> dict[tuple[str, str], tuple[str, int]]:
    """(module, function) -> (its source's hash, how many mutants mutmut made of it), from the meta files."""
    functions = {}
    for meta in mutants.rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        module = _module(meta, mutants)
        for function, digest in data.get("hash_by_function_name", {}).items():
            count = sum(key.startswith(f"{module}.{function}__mutmut_") for key in data["exit_code_by_key"])
            functions[module, function] = (digest, count)
    return functions


def _rename_equivalent(name: str, carried: dict[str, str], mutants: set[str], results: Path) -> None:
    """The group's equivalent mutants under their names now, where carried (or named so already: ``mutants`` are
    those of the code now); the others (their functions changed) are left out: what made them equivalent may not
    hold."""
    path = results / f"equivalent_{name}.json"
    if not path.exists():
        return
    before = json.loads(path.read_text(encoding="utf-8"))
    now_by_old = {old: mutant for mutant, old in carried.items()}
    after = {now_by_old.get(old, old): why for old, why in before.items() if old in now_by_old or old in mutants}
    path.write_text(json.dumps(dict(sorted(after.items())), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def note_carried(name: str, carried: dict, results: Path = RESULTS) -> None:
    """Write into the run's JSON what was carried and how the audited mutants fared when tested again."""
    path = results / f"{name}.json"
    result = json.loads(path.read_text(encoding="utf-8"))
    audit = {mutant: {"carried": status, "now": result["statuses"][mutant]}
             for mutant, status in carried["audited"].items()}
    agreed = sum(_caught(entry["carried"]) == _caught(entry["now"]) for entry in audit.values())
    result["carried"] = {"from": carried["from"], "mutants": carried["mutants"],
                         "seconds_earlier": carried["seconds_earlier"], "audited": len(audit), "audit_agreed": agreed,
                         "audit": audit}
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"[{name}] audit of carried statuses: {agreed} of {len(audit)} agree", flush=True)


def _caught(status: str) -> bool:
    return status in ("killed", "timeout")


def count_mutants(name: str, work_root: Path) -> dict[str, int]:
    """Generate ``name``'s mutants without testing them (seconds): mutants per mutated file."""
    mutated, tests = group(name)
    work = work_root / name
    scratch_copy(work)
    (work / "setup.cfg").write_text(setup_cfg(mutated, tests), encoding="utf-8")
    subprocess.run([sys.executable, "-c", "from mutmut.__main__ import create_mutants; create_mutants(2)"],
                   cwd=work, check=True, capture_output=True)
    counts = {}
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        counts[str(meta.relative_to(work / "mutants"))[:-len(".meta")]] = len(
            json.loads(meta.read_text()).get("exit_code_by_key", {}))
    return counts


def head_commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def collect(name: str, work: Path, seconds: float, max_children: int, results: Path = RESULTS,
            only: list[str] | None = None, commit: str | None = None) -> dict:
    """Every mutant's status and every non-killed mutant's diff, from mutmut's ``mutants/*.meta`` files.

    ``only``: a rerun of these mutants (after new tests): their statuses go to ``<module>.rerun.json``, over those of
    an earlier rerun, and :func:`module_statuses` lays that file over the full run's ``<module>.json``. ``commit``:
    the commit the run's copy was taken at (default: the checkout's now; commits made during a run are not in it).
    """
    statuses: dict[str, str] = {}
    existing: list[str] = []  # every mutant of the code as it is now (a rerun: code changed since may drop some)
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        for mutant, exit_code in data.get("exit_code_by_key", {}).items():
            existing.append(mutant)
            if not only or mutant in only:
                statuses[mutant] = STATUS_BY_EXIT_CODE.get(exit_code, "suspicious")
    others = {}
    for mutant, status in sorted(statuses.items()):
        if status not in ("killed", "not checked"):
            shown = subprocess.run([mutmut_bin(), "show", mutant], cwd=work, capture_output=True, text=True)
            others[mutant] = {"status": status, "diff": shown.stdout.strip()}
    mutated, tests = group(name)
    commit = commit or head_commit()
    earlier = results / f"{name}.rerun.json"
    if only and earlier.exists():  # an earlier rerun's statuses stand for the mutants this one did not test again
        before = json.loads(earlier.read_text(encoding="utf-8"))
        statuses = {**before["statuses"], **statuses}
        others = {**{mutant: entry for mutant, entry in before["not_killed"].items() if mutant not in only},
                  **others}
        seconds += before["seconds"]
    result = {"module": name, "mutated": mutated, "tests": tests, "mutmut": MUTMUT, "commit": commit,
              "max_children": max_children, "seconds": round(seconds), "total": len(statuses),
              "counts": _counts(statuses), "statuses": dict(sorted(statuses.items())), "not_killed": others}
    if only:
        result["existing"] = sorted(existing)
    results.mkdir(parents=True, exist_ok=True)
    target = results / (f"{name}.rerun.json" if only else f"{name}.json")
    if not only:  # a full run supersedes every rerun of an earlier one (mutmut's names may now mean other mutants)
        (results / f"{name}.rerun.json").unlink(missing_ok=True)
    target.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"[{name}] {len(statuses)} mutants: {result['counts']} in {seconds:.0f}s -> {target}", flush=True)
    return result


def _counts(statuses: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    return counts


def module_statuses(name: str, results: Path = RESULTS) -> dict[str, str] | None:
    """The full run's status of every mutant, with a rerun's statuses laid over it (None if never run).

    A rerun tests again, after new tests, the mutants the full run left alive, plus every mutant of any function
    whose code changed since (its mutants are renumbered: the rerun names them all); a mutant the code no longer has
    (a rerun records those it has) is left out.
    """
    full = results / f"{name}.json"
    if not full.exists():
        return None
    statuses = json.loads(full.read_text(encoding="utf-8"))["statuses"]
    rerun = results / f"{name}.rerun.json"
    if rerun.exists():
        later = json.loads(rerun.read_text(encoding="utf-8"))
        statuses = {**statuses, **later["statuses"]}
        if "existing" in later:  # mutants of code removed since the full run are gone, not killed
            existing = set(later["existing"])
            statuses = {mutant: status for mutant, status in statuses.items() if mutant in existing}
    return statuses


def equivalent_mutants(results: Path = RESULTS) -> dict[str, str]:
    """Mutant name -> why no input tells it apart from the original, from every ``equivalent_*.json``."""
    equivalent: dict[str, str] = {}
    for path in sorted(results.glob("equivalent_*.json")):
        equivalent.update(json.loads(path.read_text(encoding="utf-8")))
    return equivalent


def table(results: Path = RESULTS) -> str:
    """docs/testing.md's table: per module, mutants by status; the score leaves out the equivalent survivors and
    counts a timeout as caught (the test run did not pass)."""
    equivalent = equivalent_mutants(results)
    rows = ["| module | mutants | killed | timeout | survived | of which equivalent | score (non-equivalent) | "
            "code mutated (commit) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in MODULES:
        statuses = module_statuses(name, results)
        if statuses is None:
            rows.append(f"| {name} | not run | | | | | | |")
            continue
        counts = _counts(statuses)
        killed, timeout, survived = counts.get("killed", 0), counts.get("timeout", 0), counts.get("survived", 0)
        equal = sum(1 for mutant, status in statuses.items() if status == "survived" and mutant in equivalent)
        scored = len(statuses) - equal - counts.get("not checked", 0)
        score = f"{100 * (killed + timeout) / scored:.1f}%" if scored else "-"
        unchecked = counts.get("not checked", 0)
        total = f"{len(statuses)} ({unchecked} not checked yet)" if unchecked else str(len(statuses))
        rows.append(f"| {name} | {total} | {killed} | {timeout} | {survived} | {equal} | {score} | "
                    f"{_runs_code(name, results)} |")
    return "\n".join(rows)


def _runs_code(name: str, results: Path) -> str:
    """The commit whose code the full run mutated, and its rerun's; the files, where they were not the group's files
    of today (a run older than a move)."""
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in (results / f"{name}.json",
                                                                     results / f"{name}.rerun.json") if path.exists()]
    said = ", rerun ".join(f"`{run['commit'][:7]}`" for run in runs)
    if runs[0]["mutated"] != MODULES[name][0]:
        said += f" ({', '.join(runs[0]['mutated'])})"
    carried = runs[0].get("carried")
    if carried:
        said += (f"; {carried['mutants']} of unchanged functions carried from `{carried['from'][:7]}`, "
                 f"{carried['audit_agreed']} of {carried['audited']} tested again agree")
    return said


def groups_table() -> str:
    """docs/testing.md's table of what each module group mutates and which test files it runs, from ``MODULES``."""
    rows = ["| module | mutated files | test files |", "| --- | --- | --- |"]
    for name, (mutated, _) in MODULES.items():
        files = ", ".join(f"`{pattern}`" for pattern in mutated)
        tested = ", ".join(f"`{test.removeprefix('tests/')}`" for test in test_files(name))
        rows.append(f"| `{name}` | {files} | {tested} |")
    return "\n".join(rows) + "\n"


def report() -> None:
    """Rewrite the generated table between the markers of ``docs/testing.md`` (its table of groups is a block of
    ``tools.docs.tables``: it follows from ``MODULES``, not from results)."""
    text = TESTING_MD.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    rows = table()
    TESTING_MD.write_text(head + BEGIN + "\n" + rows + "\n" + END + tail, encoding="utf-8")
    print(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"modules to mutate, of {', '.join(MODULES)} (default: none)")
    parser.add_argument("--install", action="store_true", help=f"pip install {MUTMUT} into this venv")
    parser.add_argument("--report", action="store_true", help="rewrite docs/testing.md's table from the results")
    parser.add_argument("--work", type=Path, default=Path("/tmp/snapkv-mutation"), help="scratch directory")
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested in parallel (CPU cores)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where each module's JSON goes")
    parser.add_argument("--count", action="store_true", help="only count the modules' mutants (no tests run)")
    parser.add_argument("--mutants", nargs="*", default=[], help="only these mutants (names as mutmut gives them)")
    parser.add_argument("--survivors", action="store_true",
                        help="rerun the mutants the module's full run left alive (with --mutants: those too)")
    parser.add_argument("--resume", action="store_true",
                        help="continue an unfinished run from the module's JSON (its \"not checked\" mutants only)")
    parser.add_argument("--carry", action="store_true",
                        help="test only mutants of functions changed since the module's last full run; carry the rest")
    parser.add_argument("--audit", type=int, default=100, help="with --carry: carried mutants tested again")
    parser.add_argument("--collect", action="store_true",
                        help="only write the JSON from the scratch directory's finished run (with --mutants: a rerun)")
    args = parser.parse_args()
    unknown = sorted(set(args.modules) - set(MODULES))
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}: choose from {', '.join(MODULES)}")
    if args.install:
        install()
    if args.count:
        for name in args.modules:
            counts = count_mutants(name, args.work)
            print(f"{name}: {sum(counts.values())} mutants: {counts}")
        return
    for name in args.modules:
        mutants = list(args.mutants)
        if args.survivors:
            full = json.loads((args.results / f"{name}.json").read_text(encoding="utf-8"))
            mutants += [mutant for mutant, status in full["statuses"].items() if status != "killed"]
        if args.collect:
            collect(name, args.work / name, 0, args.max_children, args.results, only=mutants or None)
        elif args.carry:
            carried = carry(name, args.work, args.results, args.audit)
            run_module(name, args.work, args.max_children, mutants, args.results)
            note_carried(name, carried, args.results)
        else:
            earlier_seconds = resume(name, args.work, args.results) if args.resume else 0
            run_module(name, args.work, args.max_children, mutants, args.results, earlier_seconds)
    if args.report:
        report()


TABLES = {"mutation-groups": groups_table}


if __name__ == "__main__":
    main()
