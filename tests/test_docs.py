"""The generated parts of README.md and docs/*.md are what bench/report.py renders now, from
results files that exist and are not older than the code they measure unless their tables say
so.

"The code a results file measures" is bench/report.py's ``MEASURES``: the package and the bench
and worker scripts that wrote it (the kernel bench: the kernels, the methods and the residual
memory). A results file is older than that code when a commit after the one that last changed it
touched one of those paths (git history, not file times: CI runs on a fresh clone). Such a file
must be listed in ``report.OLDER`` with what changed, which its tables' labels then say;
uncommitted changes do not count until they are committed.
"""
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import report  # noqa: E402

DOCUMENTS = report.documents()
OPEN = re.compile(r"<!-- bench:(\w+) -->")
CLOSE = re.compile(r"<!-- /bench:(\w+) -->")


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _history() -> str | None:
    """Why git history cannot tell what the labels need (None: it can)."""
    try:
        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO,
                                 capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"no git: {err}"
    if shallow.returncode != 0:
        return "not a git checkout"
    if shallow.stdout.strip() != "false":
        return "a shallow clone: the results' commits are not in its history"
    return None


def _names(path: str) -> list[str]:
    return OPEN.findall(_read(path))


def test_every_marker_names_a_table_and_is_closed():
    for path in DOCUMENTS:
        text = _read(path)
        opened, closed = OPEN.findall(text), CLOSE.findall(text)
        assert opened == closed, f"{path}: markers opened {opened}, closed {closed}"
        unknown = sorted(set(opened) - set(report.TABLES))
        assert not unknown, f"{path}: no table of bench/report.py's TABLES is called {unknown}"


def test_every_generated_table_has_its_results_file():
    for path in DOCUMENTS:
        for name in _names(path):
            for results in report.TABLES[name].results:
                assert os.path.exists(os.path.join(REPO, report.results_path(results))), (
                    f"{os.path.relpath(path, REPO)}: table {name!r} reads "
                    f"{report.results_path(results)}, which is missing: run its bench "
                    f"({report.WRITTEN_BY.get(results, 'see docs/benchmarks.md')})")


def test_every_results_file_names_the_code_it_measures():
    for name, table in report.TABLES.items():
        for results in table.results:
            assert results in report.MEASURES and results in report.WRITTEN_BY, (
                f"table {name!r} reads {results}.json: say in bench/report.py's MEASURES which "
                "code it measures and in WRITTEN_BY what writes it")
    assert not set(report.OLDER) - set(report.MEASURES)
    assert not set(report.EARLIER_RUNS) - set(report.MEASURES)
    assert not set(report.OLDER) & set(report.EARLIER_RUNS)
    # a label's text pieced from the shared phrases of report.py: an f missing leaves "{_NAME}"
    assert not [name for name, text in {**report.OLDER, **report.EARLIER_RUNS}.items() if "{" in text]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: os.path.relpath(p, REPO))
def test_generated_tables_are_what_report_renders_now(path):
    why = _history()
    if why:
        pytest.skip(f"the tables' labels name commits: {why}")
    text = _read(path)
    assert report.render(text) == text, (
        f"{os.path.relpath(path, REPO)} holds stale generated tables: run "
        ".venv/bin/python bench/report.py")


@pytest.mark.parametrize("name", sorted(report.MEASURES))
def test_results_are_not_older_than_the_code_they_measure_unless_they_say_so(name):
    why = _history()
    if why:
        pytest.skip(why)
    newer = report.newer_code(name)
    if newer and name not in report.OLDER:
        pytest.fail(f"{report.results_path(name)} is older than the code it measures: "
                    f"{len(newer)} later commit(s) changed {', '.join(report.MEASURES[name])}, "
                    f"the newest {newer[0]!r}. Re-run its bench ({report.WRITTEN_BY[name]}), or "
                    "say in bench/report.py's OLDER what changed and why its tables still stand, "
                    "then run bench/report.py")
    if not newer and name in report.OLDER:
        pytest.fail(f"{report.results_path(name)} is listed in bench/report.py's OLDER, but no "
                    "commit after it changed the code it measures: remove it there and run "
                    "bench/report.py")


def test_local_links_and_anchors_resolve():
    """Every relative link of README.md and docs/*.md names a file that exists, and every
    ``#NAME`` link into docs/benchmarks.md the generated summary makes has its anchor there."""
    benchmarks = _read(os.path.join(report.DOCS, "benchmarks.md"))
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', benchmarks))
    for path in DOCUMENTS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", _read(path)):
            if "://" in target:
                continue
            assert os.path.exists(os.path.join(os.path.dirname(path), target)), (
                f"{os.path.relpath(path, REPO)} links to {target}, which does not exist")
    summary = report.generated("summary") or ""
    for anchor in re.findall(r"docs/benchmarks\.md#([\w-]+)", summary):
        assert anchor in anchors, f'docs/benchmarks.md lacks <a id="{anchor}"></a>'
