"""Every code block of README.md and docs/ runs, and the docs site builds with ``--strict``.

How a block is checked depends on its info string (see docs/development.md, "The docs"):

- ``python``: run in a Python process, from a temporary folder, with the repository on
  ``sys.path``, each block with its own globals, in page order, so each must stand alone as
  pasted. The pages share that process one after the other, what a page left in it undone
  before the next (its files removed, its Spark stopped, the in-memory provider's store
  emptied, the environment restored: ``python_pages_printed``), so the JVM starts once, not
  once per page.
- ``pycon``: a doctest.
- ``bash`` / ``sh`` / ``shell`` / ``console``: run with bash when the line before the fence is
  ``<!-- docs-test: run -->``, in page order, in a temporary folder per page that stands for the
  repository's folder (``.venv``, ``examples/conf``), each block with the environment the one
  before it left; ``console`` runs its ``$ `` lines only. The marker's options
  (``<!-- docs-test: run (ports 6379) -->``) replace the fixed ports of ``FIXED_PORTS`` with free
  loopback ports, give the page a redis-server (a Kafka broker, a PostgreSQL), run a block that
  serves until Ctrl-C in the background, and name the page's stop commands: ``docs_shell`` says
  how.
- ``json`` / ``yaml``: parsed.
- ``text``: output, not run.

``<!-- docs-test: skip (reason) -->`` on the line before a fence leaves a block out; a shell block
must carry one marker or the other. A block that appears on several pages runs once. A page
whose commands read state that no block of it makes (the dead letters) gets it from ``SETUP``.
"""

from __future__ import annotations

import dataclasses
import doctest
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from docs_output import JVM_NOTICE, matches, mismatch, rewrite_block, writing
from docs_shell import FIXED_PORTS, Block, ShellPage, parse_options

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL = {"bash", "sh", "shell", "console"}
KNOWN = SHELL | {"python", "pycon", "json", "yaml", "text"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*) *$")
MARKER = re.compile(
    r"^ *<!-- docs-test: "
    r"(?:(?P<run>run)(?: \((?P<options>[^()]*)\))?|skip \((?P<reason>.+)\)) -->$"
)
# Skipped blocks download from PyPI, build .venv, need what only another test sets up, or a
# remote cluster (Reading Kafka's run against an Apache Kafka cluster).
MOST_SKIPPED = 8
# Shown outputs the test cannot produce: a scenario that takes minutes or another machine (a
# cluster, a Kafka broker's retention), or a message shown wrapped in prose.
MOST_UNCHECKED_OUTPUTS = 12
BLOCK_TIMEOUT_S = 600
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".txt"}


def _blocks(page: Path) -> list[Block]:
    """The page's blocks, each with the ``text`` block right after it as its ``output``."""
    found = list(_fenced(page))
    lines = page.read_text(encoding="utf-8").split("\n")
    out = []
    for n, block in enumerate(found):
        after = found[n + 1] if n + 1 < len(found) else None
        between = lines[block.end : after.line - 1] if after is not None else []
        if after is not None and after.lang == "text" and not any(s.strip() for s in between):
            block = dataclasses.replace(block, output=after)
        out.append(block)
    return out


def _fenced(page: Path) -> Iterator[Block]:
    lines = page.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start, indent = i, len(fence["indent"])
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        code = textwrap.dedent("\n".join(line[indent:] for line in lines[start + 1 : end]))
        marker = MARKER.match(lines[start - 1]) if start else None
        kind = None if marker is None else ("run" if marker["run"] else "skip")
        reason = "" if marker is None or marker["run"] else marker["reason"]
        options = (marker["options"] or "") if marker is not None and marker["run"] else ""
        yield Block(
            page, start + 1, fence["lang"], code + "\n", kind, reason, options, ROOT, end + 1
        )
        i = end + 1


BLOCKS = [block for page in PAGES for block in _blocks(page)]


def _first_of_each(blocks: list[Block]) -> list[Block]:
    """Each distinct block once, where it first appears."""
    seen: set[tuple[str, str, str | None]] = set()
    out = []
    for block in blocks:
        key = (block.lang, block.code, block.output.code if block.output else None)
        if key not in seen:
            seen.add(key)
            out.append(block)
    return out


def _runnable(langs: set[str]) -> dict[Path, list[Block]]:
    by_page: dict[Path, list[Block]] = {}
    for block in _first_of_each(BLOCKS):
        if block.lang not in langs or block.marker == "skip":
            continue
        if block.lang in SHELL and block.marker != "run":
            continue
        by_page.setdefault(block.page, []).append(block)
    return by_page


PYTHON_PAGES = _runnable({"python"})
SHELL_PAGES = _runnable(SHELL)


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _env() -> dict[str, str]:
    """The environment of an activated ``.venv`` whose code is this checkout's."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("SPARK_HOME", None)
    env["NO_MKDOCS_2_WARNING"] = "1"  # mkdocs-material's notice about MkDocs 2.0, on every run
    return env


# ------------------------------------------------------------------------ every block accounted


def test_every_block_has_a_known_kind_and_shell_blocks_a_marker() -> None:
    problems = []
    for block in BLOCKS:
        if block.lang not in KNOWN:
            problems.append(
                f"{block.where}: info string {block.lang!r}, not one of {sorted(KNOWN)}"
            )
        elif block.lang in SHELL and block.marker is None:
            problems.append(
                f"{block.where}: a {block.lang} block needs <!-- docs-test: run --> or "
                "<!-- docs-test: skip (reason) --> on the line before its fence"
            )
        elif block.marker == "run" and block.lang not in SHELL:
            problems.append(
                f"{block.where}: 'run' marks shell blocks only ({block.lang} runs anyway)"
            )
        else:
            try:
                parse_options(block.options_text)
            except ValueError as exc:
                problems.append(f"{block.where}: <!-- docs-test: run (...) -->: {exc}")
    assert not problems, "\n".join(problems)
    assert len(BLOCKS) > 40, f"only {len(BLOCKS)} code blocks found: is the fence parser right?"


def _checked_outputs() -> set[str]:
    """The ``text`` blocks the test compares with what a block printed, by place."""
    run = [*(b for blocks in SHELL_PAGES.values() for b in blocks), *BLOCKS]
    return {
        b.output.where
        for b in run
        if b.output is not None and (b.lang == "python" or (b.lang in SHELL and b.marker == "run"))
    }


def test_every_shown_output_is_checked_or_says_why_it_cannot_be() -> None:
    """A transcript is a console block the test runs; other text is an output it checks."""
    checked = _checked_outputs()
    problems = []
    for block in BLOCKS:
        if block.lang != "text":
            continue
        if any(line.startswith("$ ") for line in block.code.splitlines()):
            problems.append(
                f"{block.where}: commands with their output ($ lines) in a text block: make it a "
                "console block the test runs (<!-- docs-test: run -->)"
            )
        elif block.where not in checked and block.marker != "skip":
            problems.append(
                f"{block.where}: a text block that is not what a block the test runs printed: put "
                "it right after that block, or say why it cannot be checked "
                "(<!-- docs-test: skip (reason) -->)"
            )
    assert not problems, "\n".join(problems)
    unchecked = [b for b in BLOCKS if b.lang == "text" and b.marker == "skip"]
    assert all(len(b.reason) > 15 for b in unchecked)
    assert len(unchecked) <= MOST_UNCHECKED_OUTPUTS, "\n".join(
        f"{b.where}: {b.reason}" for b in unchecked
    )


def test_skipped_blocks_are_few_and_say_why() -> None:
    skipped = [b for b in BLOCKS if b.marker == "skip" and b.lang != "text"]
    assert all(len(b.reason) > 15 for b in skipped), [
        b.where for b in skipped if len(b.reason) <= 15
    ]
    assert len(skipped) <= MOST_SKIPPED, "\n".join(f"{b.where}: {b.reason}" for b in skipped)


def test_the_readme_is_short_and_has_both_tours_and_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    assert "scripts/wordcount     #" in readme and "scripts/test          #" in readme
    assert "source .venv/bin/activate" in readme
    blocks = [b for b in BLOCKS if b.page.name == "README.md" and b.lang == "python"]
    assert all(b.marker is None for b in blocks)
    tours = [b for b in blocks if "LocalCluster" in b.code]
    assert len(tours) == 2
    assert "TopologyBuilder()" in tours[0].code and "TransactionalTopologyBuilder" in tours[1].code
    # The tour's spout, in the form that can replay after a restart.
    assert any("durable_source = True" in b.code for b in blocks if b not in tours)


def test_no_pointer_to_files_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    names = ("ARCHITECTURE.md", "TRANSACTIONAL.md", "STORM-PROTOCOL", "ARCHITECTURE section")
    found = []
    for name in tracked:
        path = ROOT / name
        if path.suffix not in TEXT_SUFFIXES or path == Path(__file__):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{name}: {n}" for n in names if n in text]
    assert not found, found


# --------------------------------------------------------------------------- data and doctests


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.lang in {"json", "yaml"}], ids=lambda b: b.where
)
def test_data_block_parses(block: Block) -> None:
    data = json.loads(block.code) if block.lang == "json" else yaml.safe_load(block.code)
    assert isinstance(data, dict) and data, f"{block.where}: not a mapping"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "pycon"], ids=lambda b: b.where)
def test_pycon_block_passes_as_a_doctest(block: Block) -> None:
    test = doctest.DocTestParser().get_doctest(block.code, {}, block.where, str(block.page), 0)
    assert test.examples, f"{block.where}: a pycon block without >>> examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0, f"{block.where}: {runner.failures} doctest example(s) failed"


# ----------------------------------------------------------------------------- running blocks

_RUNNER = """
import logging, os, shutil, sys, traceback, warnings


def reset(environ, filters, handlers, level):
    # What a page left in this process, undone before the next page: its files, its Spark, the
    # in-memory provider's store, the inline engine's held images and the SQLite provider's
    # connections (module globals), the environment, the warning filters (a changed filter
    # list also shows a warning again that was shown once) and the root logger.
    for entry in os.scandir():
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    if "pyspark" in sys.modules:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()
    memory = sys.modules.get("providers.memory")
    if memory is not None:
        memory.InMemoryKeyValueStateProvider._store.clear()
        memory.InMemoryKeyValueStateProvider._tasks.clear()
    held = sys.modules.get("statefulbolts.runtime._held_images")
    if held is not None:
        held._held.clear()
        held._loads.clear()
    sqlite = sys.modules.get("sqlite_state")
    if sqlite is not None:
        sqlite.close_connections()
    os.environ.clear()
    os.environ.update(environ)
    warnings.filters[:] = filters
    warnings._filters_mutated()
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(level)


for blocks in {pages!r}:
    root = logging.getLogger()
    saved = dict(os.environ), list(warnings.filters), list(root.handlers), root.level
    for where, path in blocks:
        print(f"{MARK}{{where}}", flush=True)
        code = compile(open(path, encoding="utf-8").read(), where, "exec")
        try:
            exec(code, {{"__name__": "__main__", "__file__": where}})
        except BaseException:
            traceback.print_exc()
            print(f"{MARK}FAILED {{where}}", flush=True)
            break
    reset(*saved)
"""
# The line the runner prints before each block: what follows is that block's output.
MARK = "==== "


@pytest.fixture(scope="module")
def python_pages_printed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, str], str]:
    """What each block of every selected page printed, by its place; and the whole output.

    The pages run in one Python process, one after the other, with what the page before left
    in the process undone (``reset`` in ``_RUNNER``): a page's Spark is stopped, so the next
    starts its own, but in the JVM already up. A JVM start is most of a page's time (some
    10 s of a 13 s page on a busy two-core machine, against 3 s for a second session in the
    same process). Every page runs from one folder, emptied after each: Spark's Python
    workers run in the folder their JVM started in, and a page's relative paths must name
    the same files in the driver and in its tasks. A block that fails ends its page; the next
    page runs.
    """
    selected = {
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_python_blocks_run_as_pasted"
    }
    folder = tmp_path_factory.mktemp("python-pages")
    pages = []
    for p, page in enumerate(sorted(selected)):
        blocks = []
        for n, block in enumerate(PYTHON_PAGES[page]):
            path = folder / f"page{p}-block{n}.py"
            path.write_text(block.code, encoding="utf-8")
            blocks.append((block.where, str(path)))
        pages.append(blocks)
    work = folder / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER.replace("{MARK}", MARK).format(pages=pages)],
        cwd=work,
        env={**_env(), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=BLOCK_TIMEOUT_S * max(len(pages), 1),
    )
    assert done.returncode == 0, done.stdout[-12000:]  # the runner itself failed
    return _printed_per_block(done.stdout), done.stdout


@pytest.mark.spark
@pytest.mark.parametrize("page", sorted(PYTHON_PAGES), ids=_page_id)
def test_python_blocks_run_as_pasted(
    page: Path, python_pages_printed: tuple[dict[str, str], str]
) -> None:
    printed, stdout = python_pages_printed
    wheres = [block.where for block in PYTHON_PAGES[page]]
    ran = [where for where in wheres if where in printed]
    failed = [where for where in ran if f"{MARK}FAILED {where}\n" in stdout]
    assert ran == wheres and not failed, _page_output(stdout, wheres)[-12000:]
    differ = []
    for block in PYTHON_PAGES[page]:
        shown = block.output
        if shown is None or matches(shown.code, printed[block.where]):
            continue
        differ.append(mismatch(shown.where, shown.code, printed[block.where]))
        if writing():
            kept = printed[block.where].splitlines(keepends=True)
            text = "".join(line for line in kept if not line.startswith(JVM_NOTICE))
            rewrite_block(page, "text", shown.code, text)
    assert not differ, "\n\n".join(differ)


def _page_output(stdout: str, wheres: list[str]) -> str:
    """What the runner printed for the page's blocks (all of it, if none of them ran)."""
    ours = {*wheres, *(f"FAILED {where}" for where in wheres)}
    kept, inside = [], False
    for line in stdout.splitlines(keepends=True):
        if line.startswith(MARK):
            inside = line[len(MARK) :].strip() in ours
        if inside:
            kept.append(line)
    return "".join(kept) or stdout


def _printed_per_block(stdout: str) -> dict[str, str]:
    """What each block printed, by its place, from the runner's output (``MARK`` lines)."""
    printed: dict[str, str] = {}
    where = None
    for line in stdout.splitlines(keepends=True):
        if line.startswith(MARK):
            where = line[len(MARK) :].strip()
            printed[where] = ""
        elif where is not None:
            printed[where] += line
    return printed


def _poisoned_word_count(folder: Path, env: dict[str, str]) -> None:
    """The state the dead letters' page reads: the word count ``wc`` on SQLite, poisoned.

    Sentence 17 of the spout is the poison one, so the record's id is the page's
    ``d6a62c2f77ba8f44``; ``sqlite.json`` is the state tool page's (``examples/conf``'s). It runs
    on the inline engine: making the state needs no Spark.
    """
    shutil.copy(ROOT / "examples" / "conf" / "sqlite.json", folder / "sqlite.json")
    code = textwrap.dedent(
        """
        import json
        import deadletter_topologies as dl
        import topologies as topo
        from statefulbolts import LocalCluster

        with open("sqlite.json") as f:
            conf = {**json.load(f), "topology.state.checkpoint.interval.ms": 100}
        spout = topo.ValueSpout("wc", dl.sentences(40, [17]), fields=("sentence",))
        with LocalCluster(engine="inline") as cluster:
            handle = cluster.submit_topology("wc", conf, dl.wordcount(spout))
            handle.await_idle(120)
            handle.kill()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder,
        env={**env, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(ROOT / "tests")])},
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    assert done.returncode == 0, f"the dead letters' setup failed\n{done.stderr[-6000:]}"
    assert "(record d6a62c2f77ba8f44)" in done.stderr, done.stderr[-6000:]


# What a page's commands read and no block of that page makes.
SETUP = {ROOT / "docs/operations/dead-letters.md": _poisoned_word_count}


def _needs_redis(page: Path) -> bool:
    """The page starts a redis-server, or needs the test's: it gets the ``redis`` mark."""
    options = [b.options for b in SHELL_PAGES[page]]
    return any("redis" in o or "6379" in o.get("ports", ()) for o in options)


def _needs_kafka(page: Path) -> bool:
    """The page needs the test's Kafka broker: it gets the ``kafka`` mark."""
    return any("kafka" in b.options for b in SHELL_PAGES[page])


def _needs_postgres(page: Path) -> bool:
    """The page needs the test's PostgreSQL: it gets the ``postgres`` mark."""
    return any("postgres" in b.options for b in SHELL_PAGES[page])


def _shell_page(page: Path) -> object:
    marks = [pytest.mark.redis] if _needs_redis(page) else []
    marks += [pytest.mark.kafka] if _needs_kafka(page) else []
    marks += [pytest.mark.postgres] if _needs_postgres(page) else []
    return pytest.param(page, marks=marks, id=_page_id(page))


@pytest.mark.spark
@pytest.mark.parametrize("page", [_shell_page(p) for p in sorted(SHELL_PAGES)])
def test_shell_blocks_run(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    blocks = SHELL_PAGES[page]
    redis_port = None
    if any("redis" in b.options for b in blocks):
        redis_port = request.getfixturevalue("redis_db").port
    kafka_port = None
    if any("kafka" in b.options for b in blocks):
        kafka_port = request.getfixturevalue("kafka_broker").port
    postgres_port = None
    if any("postgres" in b.options for b in blocks):
        postgres_port = request.getfixturevalue("postgres_server").port
    runner = ShellPage(
        blocks,
        tmp_path,
        _env(),
        root=ROOT,
        redis_port=redis_port,
        kafka_port=kafka_port,
        postgres_port=postgres_port,
        timeout=BLOCK_TIMEOUT_S,
    )
    runner.run(SETUP.get(page))


def test_every_setup_has_its_page_and_every_fixed_port_a_block() -> None:
    assert set(SETUP) <= set(SHELL_PAGES), sorted(set(SETUP) - set(SHELL_PAGES))
    used = set()
    for blocks in SHELL_PAGES.values():
        for block in blocks:
            options = block.options
            for option in ("ports", "redis", "kafka", "postgres"):
                used |= {int(p) for p in options.get(option, ())}
            used |= {int(p) for p in options.get("serve", ())[:1]}
    assert used == set(FIXED_PORTS), f"FIXED_PORTS that no block names: {set(FIXED_PORTS) - used}"


def test_the_tours_and_the_state_tour_are_run() -> None:
    """The blocks a newcomer meets first are among those run, not skipped."""
    run = {b.where for blocks in (*PYTHON_PAGES.values(), *SHELL_PAGES.values()) for b in blocks}
    readme = [b.where for b in BLOCKS if b.page.name == "README.md" and b.lang == "python"]
    assert set(readme) <= run
    state = [b for b in SHELL_PAGES.get(ROOT / "docs/operations/state-tool.md", [])]
    assert any("state dump" in b.code for b in state)


# ------------------------------------------------------------------------------ the site itself


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "config_reference", ROOT / "docs" / "_gen" / "config_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_reference_has_every_key_of_the_models() -> None:
    from providers._config import StateProviderConfig
    from statefulbolts.config import KNOWN_KEYS, Config

    text = _generator().render()
    constants = {v for k, v in vars(Config).items() if k.startswith("TOPOLOGY_")}
    for key in {*KNOWN_KEYS, *constants}:
        assert f"| `{key}` |" in text, key
    for name, field in StateProviderConfig.model_fields.items():
        assert f"| `{field.alias or name}` |" in text, name
    for nested in ("jedisPoolConfig.port", "redisConfig.url", "jedisClusterConfig.nodes"):
        assert f"| `{nested}` |" in text, nested
    generator = _generator()
    for dotted in generator.CONNECTOR_MODELS:
        module, _, name = dotted.rpartition(".")
        for field in getattr(importlib.import_module(module), name).model_fields.values():
            assert f"| `{field.alias}` |" in text, field.alias
    assert "| `redis.stream.group` | string | the topology name |" in text
    assert "| `redis.stream.keys` | list of strings | none |" in text


def test_a_key_without_a_meaning_fails_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = _generator()
    meanings = dict(generator.TOPOLOGY_MEANINGS)
    del meanings["topology.ui.port"]
    monkeypatch.setattr(generator, "TOPOLOGY_MEANINGS", meanings)
    with pytest.raises(KeyError, match="topology.ui.port"):
        generator.render()
    stale = {**generator.PROVIDER_MEANINGS, "jedisPoolConfig.nosuch": "gone"}
    monkeypatch.setattr(generator, "PROVIDER_MEANINGS", stale)
    monkeypatch.setattr(generator, "TOPOLOGY_MEANINGS", dict(_generator().TOPOLOGY_MEANINGS))
    with pytest.raises(ValueError, match="jedisPoolConfig.nosuch"):
        generator.render()


def test_mkdocs_builds_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.fail("the docs need mkdocs and mkdocs-material: pip install -e '.[docs]'")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**_env(), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    reference = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "topology.state.checkpoint.interval.ms" in reference
    assert "<!-- config-reference -->" not in reference
    for page in ("protocol/checkpoint", "protocol/transactional", "operations/cluster"):
        assert (site / page / "index.html").is_file(), page
