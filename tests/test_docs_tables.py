"""Every generated table and every inline value (a number in a sentence) of the docs follows from the committed JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def tables():
    from tools.docs import tables

    return tables


def test_generated_blocks_match_the_committed_json(tables):
    assert tables.process(write=False) == []


def test_stored_summaries_match_their_raw_records(tables):
    assert tables.stored_summaries_mismatches() == []


def test_every_result_json_is_used_by_a_generated_block(tables):
    text = "".join(file.read_text(encoding="utf-8") for file in tables.FILES)
    arguments = {argument for spec in tables.specs(text) for argument in spec.split()[1:]}
    for path in DOCS.glob("results/**/*.json"):
        relative = path.relative_to(DOCS).as_posix()
        if path.parent.name == "mutation":  # docs/testing.md's table: test_mutation_table_follows_its_json
            continue
        assert relative in arguments or path.parent.relative_to(DOCS).as_posix() in arguments, relative


def test_the_methods_table_follows_the_method_registry(tables, monkeypatch):
    """A method added to the registry makes the table of methods differ, in docs/methods.md and wherever else it is
    generated (so the check fails), until the table is rewritten, with the method's row in it."""
    from snapkv_cli.engine.methods import METHODS, Method

    monkeypatch.setitem(METHODS, "dummykv", Method("dummykv", "a dummy method", "nothing it did not keep",
                                                   "[Dummy](https://example.org/dummy)"))
    holding = [f"{file.relative_to(tables.ROOT)}: methods-table" for file in tables.FILES
               if "<!-- generated: methods-table -->" in file.read_text(encoding="utf-8")]
    assert "docs/methods.md: methods-table" in holding
    assert tables.process(write=False) == holding
    from tools.docs import methods_table

    assert ("| `dummykv` | [Dummy](https://example.org/dummy) | nothing it did not keep |"
            in methods_table.methods_table())


def test_the_check_catches_an_edited_number(tables, tmp_path, monkeypatch):
    """Change one outcome in a copy of a committed accuracy JSON: the regenerated table must differ."""
    source = next(p for p in sorted(DOCS.glob("results/*.json")) if json.loads(p.read_text())["kind"] == "accuracy")
    report = json.loads(source.read_text())
    from tools.bench import accuracy
    from tools.docs import prose

    before = accuracy.accuracy_table(source.relative_to(DOCS).as_posix())
    changed = next(o for o in report["outcomes"] if o["method"] != "full")
    changed["correct"] = not changed["correct"]
    copy = tmp_path / "copy.json"
    copy.write_text(json.dumps(report))
    monkeypatch.setattr(prose, "DOCS", tmp_path)
    assert accuracy.accuracy_table("copy.json") != before


def _copy_of(tables, tmp_path, monkeypatch, name: str) -> Path:
    """A copy of one doc as the only file the check reads."""
    copy = tmp_path / name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text((tables.ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    monkeypatch.setattr(tables, "FILES", (copy,))
    return copy


def test_the_check_catches_an_edited_number_in_a_sentence(tables, tmp_path, monkeypatch):
    """A number of a sentence edited by hand in a copy of the README: the check names its value, and --write puts the
    number from the JSON back."""
    copy = _copy_of(tables, tmp_path, monkeypatch, "README.md")
    original = copy.read_text(encoding="utf-8")
    spec = "default-rule.full results/default_rule"
    marker = f"<!-- value: {spec} -->"
    number = original.split(marker)[1].split("<!-- end -->")[0]
    assert number.isdigit()
    copy.write_text(original.replace(f"{marker}{number}<", f"{marker}{int(number) + 1}<"), encoding="utf-8")
    assert tables.process(write=False) == [f"README.md: value {spec}"]
    tables.process(write=True)
    assert copy.read_text(encoding="utf-8") == original


def test_the_check_catches_an_edited_number_in_a_table(tables, tmp_path, monkeypatch):
    copy = _copy_of(tables, tmp_path, monkeypatch, "docs/batch.md")
    original = copy.read_text(encoding="utf-8")
    assert "| 355.8 s |" in original
    copy.write_text(original.replace("| 355.8 s |", "| 355.9 s |"), encoding="utf-8")
    assert tables.process(write=False) == ["docs/batch.md: batch-table batch_bench.json"]


def test_a_value_naming_a_fact_its_function_lacks_fails(tables):
    with pytest.raises(KeyError, match="no fact 'nonsense'"):
        tables.render_value("batch.nonsense batch_bench.json", {})


def test_a_value_whose_json_is_not_committed_shows_no_number(tables):
    assert tables.render_value("batch.loop results/never_run.json", {}) == "*not run yet*"


def test_every_value_and_block_names_a_function_that_exists(tables):
    """Every spec in the docs: a generator of ``GENERATORS``, or a facts function of ``FACTS`` with a fact."""
    for file in tables.FILES:
        for spec in tables.specs(file.read_text(encoding="utf-8")):
            name = spec.split()[0]
            assert name in tables.GENERATORS or name.split(".")[0] in tables.FACTS, f"{file.name}: {spec}"


def test_every_run_benchmarks_step_the_docs_name_exists():
    """A doc's ``bash tools/bench/run_benchmarks.sh STEP ...`` names steps the script defines."""
    import re

    from tools.docs import tables

    script = (DOCS.parent / "tools" / "bench" / "run_benchmarks.sh").read_text(encoding="utf-8")
    steps = set(re.findall(r"^(\w+)\(\) \{", script, re.M))
    named = [step for file in tables.FILES
             for command in re.findall(r"run_benchmarks\.sh((?: [a-z0-9]+)+)", file.read_text(encoding="utf-8"))
             for step in command.split()]
    assert named and set(named) <= steps, set(named) - steps


def test_mutation_table_follows_its_json():
    """docs/testing.md's mutation table is what tools/bench/mutation.py computes from docs/results/mutation/."""
    from tools.bench import mutation

    text = (DOCS / "testing.md").read_text(encoding="utf-8")
    assert mutation.table() in text.split(mutation.BEGIN)[1].split(mutation.END)[0]


def test_a_groups_mutants_face_every_test_file_written_for_its_code(tmp_path):
    """A test file named after a mutated file or package, or in a mutated package's test folder, runs against the
    group's mutants without being listed by hand (a test file written for new engine code was once left out)."""
    from tools.bench import mutation

    engine = mutation.test_files("engine")
    assert {path.relative_to(DOCS.parent).as_posix() for path in (DOCS.parent / "tests" / "engine").glob("test_*.py")
            } <= set(engine)
    assert {"tests/test_streaming.py", "tests/test_generation.py"} <= set(mutation.test_files("generation"))
    assert "tests/test_views.py" in mutation.test_files("report_views")  # named after the package views/
    for name in ("snapkv_cli/engine/fresh.py", "snapkv_cli/answering/prompting.py", "tests/test_fresh.py",
                 "tests/engine/test_anything.py", "tests/test_prompting.py", "tests/test_unrelated.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    found = mutation.test_files("engine", root=tmp_path)
    assert {"tests/test_fresh.py", "tests/engine/test_anything.py"} <= set(found)
    assert "tests/test_unrelated.py" not in found and "tests/test_prompting.py" not in found
    assert "tests/test_prompting.py" in mutation.test_files("documents_prompting", root=tmp_path)


def test_a_full_mutation_run_replaces_the_earlier_runs_rerun(tmp_path):
    """A rerun's statuses are laid over its full run's by mutant name; after a new full run those names may mean
    other mutants, so the earlier rerun must not outlive it."""
    from tools.bench import mutation

    results, work = tmp_path / "results", tmp_path / "work"
    (work / "mutants" / "snapkv_cli").mkdir(parents=True)
    (work / "mutants" / "snapkv_cli" / "answering").mkdir()
    (work / "mutants" / "snapkv_cli" / "answering" / "session.py.meta").write_text(
        json.dumps({"exit_code_by_key": {"snapkv_cli.answering.session.x_f__mutmut_1": 1}}))
    results.mkdir()
    (results / "session.rerun.json").write_text(json.dumps(
        {"statuses": {"snapkv_cli.answering.session.x_f__mutmut_1": "survived"}, "not_killed": {}, "seconds": 1}))
    mutation.collect("session", work, 5.0, 2, results, commit="0" * 40)
    assert not (results / "session.rerun.json").exists()
    assert mutation.module_statuses("session", results) == {"snapkv_cli.answering.session.x_f__mutmut_1": "killed"}


def test_statuses_are_carried_only_for_functions_whose_source_is_unchanged():
    """A moved function with the same source keeps its mutants' statuses under their new names; a changed or new
    function, a name two old modules had, a status never known, or a mutant tested already now, is not carried."""
    from tools.bench import mutation

    old = {("snapkv_cli.pipeline", "x_ask"): ("aaa", 2), ("snapkv_cli.pipeline", "x_changed"): ("bbb", 1),
           ("snapkv_cli.a", "x_twice"): ("ccc", 1), ("snapkv_cli.b", "x_twice"): ("ccc", 1),
           ("snapkv_cli.answering.session", "x_kept"): ("ddd", 2)}
    statuses = {"snapkv_cli.pipeline.x_ask__mutmut_1": "killed", "snapkv_cli.pipeline.x_ask__mutmut_2": "survived",
                "snapkv_cli.pipeline.x_changed__mutmut_1": "killed", "snapkv_cli.a.x_twice__mutmut_1": "killed",
                "snapkv_cli.answering.session.x_kept__mutmut_1": "killed",
                "snapkv_cli.answering.session.x_kept__mutmut_2": "not checked"}
    now = "snapkv_cli.answering.session"
    codes = {f"{now}.{name}": None for name in ("x_ask__mutmut_1", "x_ask__mutmut_2", "x_changed__mutmut_1",
                                                   "x_twice__mutmut_1", "x_new__mutmut_1", "x_kept__mutmut_1",
                                                   "x_kept__mutmut_2")}
    metas = {now: {"hash_by_function_name": {"x_ask": "aaa", "x_changed": "BBB", "x_twice": "ccc", "x_new": "eee",
                                             "x_kept": "ddd"}, "exit_code_by_key": codes}}
    assert mutation.carried_mutants(old, metas, statuses) == {
        f"{now}.x_ask__mutmut_1": "snapkv_cli.pipeline.x_ask__mutmut_1",
        f"{now}.x_ask__mutmut_2": "snapkv_cli.pipeline.x_ask__mutmut_2",
        f"{now}.x_kept__mutmut_1": f"{now}.x_kept__mutmut_1"}
    codes[f"{now}.x_ask__mutmut_1"] = 1  # tested in this checkout already (a stopped run): its own status stands
    assert f"{now}.x_ask__mutmut_1" not in mutation.carried_mutants(old, metas, statuses)


def test_methods_timing_compares_each_round_with_snapkvs_round(tables):
    """tools/bench/methods_timing.py: a method's prefill and decode against SnapKV's in the same round (the median of
    those ratios), its selection's extra time as a share of SnapKV's median prefill, SnapKV's own decode spread."""
    from tools.bench import methods_timing as timing

    def run(round_index, method, prefill, selection, decode, slots):
        return {"round": round_index, "method": method, "prefill_s": prefill, "selection_s": selection,
                "decode_tokens_per_s": decode, "tokens_after": 256.0, "tokens_allocated": slots, "bytes_after": 1}

    runs = [run(0, "snapkv", 10.0, 0.1, 20.0, 256), run(0, "defensivekv", 11.0, 0.3, 20.0, 350),
            run(1, "snapkv", 20.0, 0.1, 25.0, 256), run(1, "defensivekv", 20.0, 0.5, 20.0, 350),
            run(2, "snapkv", 30.0, 0.1, 20.0, 256), run(2, "defensivekv", 31.5, 0.4, 30.0, 350)]
    snapkv, defensive = timing.summarize(runs)
    assert snapkv["prefill_vs_snapkv"] == 0 and snapkv["selection_overhead_vs_snapkv"] == 0
    assert defensive["prefill_vs_snapkv"] == pytest.approx(0.05)  # per round +10%, 0%, +5%: the median
    assert defensive["prefill_s"] == 20.0 and defensive["selection_s"] == 0.4
    assert defensive["selection_overhead_vs_snapkv"] == pytest.approx((0.4 - 0.1) / 20.0)
    assert defensive["decode_vs_snapkv"] == pytest.approx(0.0)  # 0%, -20%, +50%
    assert defensive["snapkv_decode_spread"] == pytest.approx(0.25) and defensive["tokens_allocated"] == 350
    assert "| defensivekv | 20.0 | +5.0% |" in timing.markdown([snapkv, defensive])


def test_retention_pooled_pools_tasks_and_lengths_by_pair(tables, tmp_path, monkeypatch):
    """Two lengths, two tasks: one row per budget, counting only the samples the full cache answers."""
    def outcome(task, length, seed, method, budget, correct):
        return {"task": task, "length": length, "sample": 0, "seed": seed, "depth": 0.5, "prompt_tokens": length,
                "max_new_tokens": 8, "method": method, "budget": budget, "correct": correct, "answer": "",
                "expected": ["1"], "extracted": None, "generated_tokens": 1}

    outcomes = [outcome("single_needle", 4096, "a", "full", None, True),
                outcome("single_needle", 4096, "a", "snapkv", 128, True),
                outcome("multi_key", 4096, "b", "full", None, True),
                outcome("multi_key", 4096, "b", "snapkv", 128, False),
                outcome("single_needle", 8192, "c", "full", None, False),
                outcome("single_needle", 8192, "c", "snapkv", 128, True),  # gained: not a pair
                outcome("single_needle", 8192, "d", "full", None, True),
                outcome("single_needle", 8192, "d", "snapkv", 128, True)]
    plan = {"window_size": 32, "kernel_size": 15, "pooling": "maxpool", "gqa_aggregation": "mean",
            "max_new_tokens": None, "split": "test", "lengths": [4096, 8192], "tasks": ["single_needle", "multi_key"]}
    (tmp_path / "run.json").write_text(json.dumps({"plan": plan, "provenance": {}, "outcomes": outcomes}))
    from tools.bench import accuracy
    from tools.docs import prose

    monkeypatch.setattr(prose, "DOCS", tmp_path)
    table = accuracy.retention_pooled("run.json", "methods=snapkv,adakv", "budgets=128,256")
    assert "| 128 | 2 / 3 (66.7%) [21-94] | not run |" in table
    assert "| 256 | not run | not run |" in table


def test_needle_cells_kept_count_only_the_cells_a_budget_compressed(tables):
    from snapkv_cli.bench.niah import NiahOutcome

    def cell(length, depth, method, budget, exact, prompt_tokens):
        return NiahOutcome(length, depth, prompt_tokens, depth / 100, method, budget, exact, float(exact), "",
                           1.0, 1.0)

    outcomes = [cell(1024, 0, "full", None, True, 880), cell(2048, 0, "full", None, True, 1900),
                cell(2048, 50, "full", None, True, 1900), cell(4096, 0, "full", None, False, 3900),
                cell(1024, 0, "snapkv", 1024, True, 880),  # kept whole: neither kept nor lost by compression
                cell(2048, 0, "snapkv", 1024, True, 1900), cell(2048, 50, "snapkv", 1024, False, 1900),
                cell(4096, 0, "snapkv", 1024, True, 3900),  # the full cache missed it: not a cell to keep
                cell(1024, 0, "snapkv", 256, True, 880), cell(2048, 0, "snapkv", 256, True, 1900),
                cell(2048, 50, "snapkv", 256, True, 1900)]
    from tools.bench import niah

    kept, full_exact = niah._niah_kept(outcomes)
    assert full_exact == 3
    assert kept[("snapkv", 1024)] == (1, 2) and kept[("snapkv", 256)] == (3, 3)
    assert niah._kept_text(kept[("snapkv", 1024)], full_exact) == "1/2 (+1 not compressed)"
    assert niah._kept_text(kept[("snapkv", 256)], full_exact) == "3/3"


def test_the_inspect_example_was_written_by_the_current_views(tmp_path):
    """docs/inspect_example.html (and its PNGs) came from the views as they are; a change to one of them makes the
    check fail until the example is written again."""
    from tools.docs import inspect_example, tables

    assert tables.drifted() == []
    copies = []
    for view in inspect_example.VIEWS:  # the same files, byte for byte, in a copy of the repository
        copy = tmp_path / view.relative_to(inspect_example.ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(view.read_bytes())
        copies.append(copy)
    assert inspect_example.drift(copies, tmp_path) == []
    copies[1].write_text(copies[1].read_text(encoding="utf-8") + "<!-- an edit -->\n", encoding="utf-8")
    assert inspect_example.drift(copies, tmp_path) == [
        "docs/inspect_example.html: the views changed since it was written (run python -m tools.docs.inspect_example)"]


def test_a_table_name_declared_by_two_owners_is_refused(tables, monkeypatch):
    from types import SimpleNamespace

    twice = SimpleNamespace(__name__="twice", TABLES={"speed-table": lambda path: ""})
    monkeypatch.setattr(tables, "OWNERS", (*tables.OWNERS, twice))
    with pytest.raises(ValueError, match="speed-table"):
        tables._registry("TABLES")
