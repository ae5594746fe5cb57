"""The docs' shell-block runner on pages of its own: ports, environment, servers, stop commands.

Servers here are Python's ``http.server`` on loopback, so these tests need neither Spark nor
Redis and take about a second.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from pathlib import Path

import pytest
from docs_output import matches
from docs_shell import Block, BlockFailedError, ShellPage, parse_options

ROOT = Path(__file__).resolve().parents[2]
# A server for port 8000 (one of FIXED_PORTS), as a reader's command would start one.
HTTP_SERVER = f"{sys.executable} -m http.server 8000 --bind 127.0.0.1"
WAIT_FOR_8000 = "until curl -s -o /dev/null http://127.0.0.1:8000/; do sleep 0.05; done; echo up\n"


def _page(tmp_path: Path, *blocks: tuple[str, str]) -> list[Block]:
    """Blocks ``(options, code)`` of a page ``page.md`` in ``tmp_path``."""
    page = tmp_path / "page.md"
    return [
        Block(page, n, "bash", code, "run", "", options, tmp_path)
        for n, (options, code) in enumerate(blocks, 1)
    ]


def _runner(tmp_path: Path, blocks: list[Block]) -> ShellPage:
    folder = tmp_path / "run"
    folder.mkdir()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return ShellPage(blocks, folder, env, root=ROOT, timeout=60, close_timeout=0.5)


def _listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_fixed_port_becomes_a_free_one_in_the_blocks_and_the_example_configs(
    tmp_path: Path,
) -> None:
    blocks = _page(
        tmp_path,
        ("ports 6379", "echo port 6379 63790 16379 | tee seen.txt\n"),
        ("", "cat seen.txt\n"),
    )
    runner = _runner(tmp_path, blocks)
    runner.run()
    free = runner.ports[6379]
    assert free != 6379
    assert (runner.folder / "seen.txt").read_text() == f"port {free} 63790 16379\n"
    conf = (runner.folder / "examples" / "conf" / "redis.json").read_text()
    assert f'"port\\": {free},' in conf and "6379" not in conf
    assert (runner.folder / ".venv" / "bin" / "python").exists()


def test_each_block_starts_with_the_environment_the_one_before_left(tmp_path: Path) -> None:
    blocks = _page(
        tmp_path, ("", "export GREETING=hello\n"), ("", 'echo "$GREETING" | tee out.txt\n')
    )
    runner = _runner(tmp_path, blocks)
    runner.run()
    assert (runner.folder / "out.txt").read_text() == "hello\n"


def test_a_block_that_does_nothing_visible_fails(tmp_path: Path) -> None:
    with pytest.raises(BlockFailedError, match=r"page.md:1 printed nothing"):
        _runner(tmp_path, _page(tmp_path, ("", "true\n"))).run()


def test_the_stop_commands_run_after_a_failed_block_and_the_port_is_checked(
    tmp_path: Path,
) -> None:
    blocks = _page(
        tmp_path,
        (
            "ports 8000",
            f"{HTTP_SERVER} > server.log 2>&1 & echo $! | tee server.pid\n{WAIT_FOR_8000}",
        ),
        ("", "echo about to fail; exit 3\n"),
        ("", "echo never run | tee never.txt\n"),
        ("finally", 'kill "$(cat server.pid)"; echo stopped > stopped.txt\n'),
    )
    runner = _runner(tmp_path, blocks)
    with pytest.raises(BlockFailedError) as failed:
        runner.run()
    message = str(failed.value)
    assert message.startswith("page.md:2 exited 3\nabout to fail")
    assert "still listening" not in message
    assert (runner.folder / "stopped.txt").exists()
    assert not (runner.folder / "never.txt").exists()
    assert not _listens(runner.ports[8000])


def test_a_server_left_running_is_killed_and_fails_the_page(tmp_path: Path) -> None:
    started = f"{HTTP_SERVER} > server.log 2>&1 &\n{WAIT_FOR_8000}"
    blocks = _page(tmp_path, ("ports 8000", started))
    runner = _runner(tmp_path, blocks)
    with pytest.raises(BlockFailedError, match=r"mkdocs serve \(port 8000, here \d+\) was still"):
        runner.run()
    assert not _listens(runner.ports[8000])


def test_a_serving_block_answers_then_exits_0_on_ctrl_c(tmp_path: Path) -> None:
    blocks = _page(
        tmp_path,
        ("serve 8000 / Serving HTTP", f"echo serving; exec {HTTP_SERVER}\n"),
        ("ports 8000", "curl -s http://127.0.0.1:8000/ > listing.html; echo fetched\n"),
    )
    runner = _runner(tmp_path, blocks)
    runner.run()
    assert "Directory listing" in (runner.folder / "listing.html").read_text()
    ((_, process, log),) = runner.servers
    assert process.returncode == 0 and "Serving HTTP on 127.0.0.1" in log.read_text()
    assert not _listens(runner.ports[8000])


def test_a_serving_block_that_dies_fails_with_its_output(tmp_path: Path) -> None:
    blocks = _page(tmp_path, ("serve 8000 /", "echo cannot serve; exit 4\n"))
    with pytest.raises(BlockFailedError, match=r"page.md:1 exited 4 before .*\ncannot serve"):
        _runner(tmp_path, blocks).run()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("port 6379", "unknown option 'port'"),
        ("ports", "takes one or more argument"),
        ("ports 1234", "port '1234' is not one of FIXED_PORTS"),
        ("serve 8765", "takes 2 or more argument"),
        ("serve 8765 index.html", "must start with '/'"),
        ("paths tmp/site", "absolute paths only"),
        ("in docs", "'repository' only"),
        ("finally now", "takes 0 argument"),
    ],
)
def test_a_bad_option_is_named(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_options(text)


def test_options_parse() -> None:
    assert parse_options("ports 7077 8080; finally") == {"ports": ("7077", "8080"), "finally": ()}
    assert parse_options("in repository; serve 8000 /") == {
        "in": ("repository",),
        "serve": ("8000", "/"),
    }
    assert parse_options("") == {}


# ------------------------------------------------------------------------- shown outputs
def _shown(block: Block, text: str) -> Block:
    """``block`` with a ``text`` block right after it, showing ``text``."""
    output = Block(block.page, block.line + 10, "text", text, None, root=block.root)
    return dataclasses.replace(block, output=output)


def test_what_a_block_printed_is_checked_against_the_text_shown_after_it(
    tmp_path: Path,
) -> None:
    code = "echo 'took 1.25s on port 6379'; echo started 2026-11-28 08:20:15 UTC; echo done >&2\n"
    [block] = _page(tmp_path, ("ports 6379", code))
    shown = "took 0.40s on port 6379\nstarted 2025-01-01 00:00:00 UTC\ndone\n"
    runner = _runner(tmp_path, [_shown(block, shown)])
    runner.run()  # times and the free port are no difference
    (tmp_path / "w").mkdir()
    wrong = _runner(tmp_path / "w", [_shown(block, "took 1.25s on port 6380\n...\n")])
    with pytest.raises(BlockFailedError, match=r"page.md:11: the output shown differs"):
        wrong.run()


def test_dots_stand_for_lines_or_text_a_page_leaves_out() -> None:
    printed = "first\nmiddle one\nmiddle two\nlast: 42 words\n"
    assert matches("first\n...\nlast: ... words\n", printed)
    assert matches("...\nlast: 42 words\n", printed)
    assert matches("first\n...\nmiddle one\nmiddle two\n...\n", printed)  # ... may be no line
    assert not matches("first\nlast: ... words\n", printed)
    assert not matches("first\n...\nlast: 43 words\n", printed)


def test_a_console_block_checks_each_commands_output_and_status(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    code = "$ echo hi\nhi\n$ false\n$ echo $?\n1\n$ printf 'no newline'\nno newline\n"
    runner = _runner(tmp_path, [Block(page, 1, "console", code, "run", root=tmp_path)])
    runner.run()
    failing = "$ false\n$ echo next\nnext\n"
    (tmp_path / "f").mkdir()
    runner = _runner(tmp_path / "f", [Block(page, 1, "console", failing, "run", root=tmp_path)])
    with pytest.raises(BlockFailedError, match=r"`false` exited 1 \(a console command may fail"):
        runner.run()
    wrong = "$ echo hi\nho\n"
    (tmp_path / "w").mkdir()
    runner = _runner(tmp_path / "w", [Block(page, 1, "console", wrong, "run", root=tmp_path)])
    with pytest.raises(BlockFailedError, match=r"page.md:1: `echo hi`: the output shown differs"):
        runner.run()
