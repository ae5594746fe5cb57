"""Run the shell blocks of one docs page as a reader runs them, on free loopback ports.

The blocks of a page run in page order, each in its own ``bash -euo pipefail``, in one folder
per page that holds what the docs call the repository's folder: ``.venv`` (a link to the
virtualenv running the tests) and a copy of ``examples/conf``. Each block starts with the
environment the one before it left, as in one terminal (``export``, ``source
.venv/bin/activate``).

A run marker may carry options, separated by ``;``
(``<!-- docs-test: run (ports 7077 8080; finally) -->``):

- ``ports P ...``: each fixed port ``P`` in the block is replaced by a free loopback port, the
  same one in every block of the page and in the copied example configs. Only the ports of
  ``FIXED_PORTS`` may be replaced, so a reader's page keeps the numbers they paste.
- ``redis P``: as ``ports``, with the test's own redis-server listening there.
- ``kafka P``: as ``ports``, with the test's Kafka broker (``kafka_fixtures``) listening there.
- ``postgres P``: as ``ports``, with the test's PostgreSQL (``postgres_fixtures``) listening
  there (user ``postgres``, no password, database ``postgres``).
- ``serve P PATH [TEXT]``: the block serves until Ctrl-C (``P`` replaced as by ``ports``). It
  runs in the background until ``http://127.0.0.1:P PATH`` answers 200 with a body and its
  output shows ``TEXT`` (if given), the page's next blocks run while it serves, then it gets
  SIGINT, as from Ctrl-C, and must exit with status 0.
- ``paths PATH ...``: each absolute path is replaced by a new folder inside the page's folder.
- ``in repository``: the block runs in the repository's folder (``mkdocs``).
- ``finally``: runs after the other blocks even when one failed (the page's stop commands),
  and may print nothing.

A block passes when it exits 0 and prints something (on either stream) or changes the
environment, and prints what the page shows it printing (``docs_output``): the ``text`` block
right after it, or in a ``console`` block the lines after each ``$ `` command. A ``console``
block runs its commands one by one, in one bash, as typed at a prompt: a command may fail only
when the next one is ``echo $?`` (which shows its status). After the page, whatever still
listens on a replaced port is killed with its child processes, and that fails the test: a page
stops what it starts.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from docs_output import JVM_NOTICE, matches, mismatch, rewrite_block, writing
from redis_fixtures import free_port
from standalone_cluster import process_tree

# The fixed ports the docs may name, and what listens there; each is replaced by a free port.
FIXED_PORTS = {
    6379: "Redis",
    9092: "a Kafka broker",
    5432: "PostgreSQL",
    7077: "a standalone Spark master",
    8000: "mkdocs serve",
    8080: "the Spark master's web UI",
    8081: "a Spark worker's web UI",
    8765: "the dashboard",
}
# The options of a run marker and how many arguments each takes (None: one or more; -2: two or
# more).
OPTIONS: dict[str, int | None] = {
    "ports": None,
    "redis": 1,
    "kafka": 1,
    "postgres": 1,
    "serve": -2,
    "paths": None,
    "in": 1,
    "finally": 0,
}
SERVE_TIMEOUT_S = 300
STOP_TIMEOUT_S = 120
# How long a stopped server may take to close its port (spark-daemon.sh stop does not wait).
CLOSE_TIMEOUT_S = 60
# Variables every bash sets for itself: a block that changes only these changed nothing. A
# non-interactive bash also drops PS1, which a virtualenv's ``activate`` exports: run from an
# activated shell, every block would have "changed" it.
_SHELL_OWN = {"PWD", "OLDPWD", "SHLVL", "_", "PS1"}


def parse_options(text: str | None) -> dict[str, tuple[str, ...]]:
    """The options of a run marker, ``{"ports": ("7077", "8080"), "finally": ()}``.

    Raises:
        ValueError: an unknown option, a wrong number of arguments, a port that is not in
            ``FIXED_PORTS``, a relative path, or ``in`` anything but ``repository``.
    """
    options: dict[str, tuple[str, ...]] = {}
    for item in (text or "").split(";"):
        if not item.strip():
            continue
        name, *args = item.split()
        if name not in OPTIONS:
            msg = f"unknown option {name!r}; the options are {sorted(OPTIONS)}"
            raise ValueError(msg)
        wanted = OPTIONS[name]
        if wanted is None:
            wrong, count = not args, "one or more"
        elif wanted < 0:
            wrong, count = len(args) < -wanted, f"{-wanted} or more"
        else:
            wrong, count = len(args) != wanted, str(wanted)
        if wrong:
            msg = f"option {name!r} takes {count} argument(s), got {args}"
            raise ValueError(msg)
        servers = ("ports", "redis", "kafka", "postgres")
        ports = args if name in servers else args[:1] if name == "serve" else []
        for port in ports:
            if not port.isdigit() or int(port) not in FIXED_PORTS:
                msg = (
                    f"option {name!r}: port {port!r} is not one of FIXED_PORTS "
                    f"{sorted(FIXED_PORTS)}; add it there with what listens on it"
                )
                raise ValueError(msg)
        if name == "serve" and not args[1].startswith("/"):
            msg = f"option 'serve': the page to check, {args[1]!r}, must start with '/'"
            raise ValueError(msg)
        if name == "paths" and not all(p.startswith("/") for p in args):
            msg = f"option 'paths' replaces absolute paths only, got {args}"
            raise ValueError(msg)
        if name == "in" and args != ["repository"]:
            msg = f"option 'in' takes 'repository' only, got {args}"
            raise ValueError(msg)
        options[name] = tuple(args)
    return options


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    lang: str
    code: str
    marker: str | None  # "run", "skip", or None
    reason: str = ""
    options_text: str = ""
    root: Path = Path()
    end: int = 0  # the line of its closing fence
    # The ``text`` block right after it (only blank lines between): what it prints.
    output: Block | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(self.root)}:{self.line}"

    @property
    def options(self) -> dict[str, tuple[str, ...]]:
        return parse_options(self.options_text)

    def shell_code(self) -> str:
        """What bash runs: the block, or a ``console`` block's ``$ `` lines."""
        if self.lang != "console":
            return self.code
        return "".join(f"{command}\n" for command, _ in self.transcript())

    def transcript(self) -> list[tuple[str, str]]:
        """A ``console`` block's commands, each with the output shown after it."""
        steps: list[tuple[str, list[str]]] = []
        for line in self.code.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
        return [(command, "".join(f"{x}\n" for x in shown)) for command, shown in steps]


class BlockFailedError(AssertionError):
    """A block of the page failed; the message says which and shows its output."""


# Where the docs show the reader's clone of the repository, in what a command printed.
REPOSITORY = "/home/you/statefulbolts"
# The line a console block's script prints after each command: its index and exit status.
_STEP_MARK = "@@docs-test-step@@"


def _steps(printed: str, count: int) -> list[tuple[str, int]]:
    """``(output, status)`` of each of ``count`` console commands, from their script's output.

    A command that printed no final newline gets the one its marker line starts with; a
    command whose script stopped before it (a lost shell) has status -1.
    """
    out: list[tuple[str, int]] = []
    text = ""
    for line in printed.splitlines(keepends=True):
        if line.startswith(_STEP_MARK):
            _, _, status = line.split()
            out.append((text[:-1] if text.endswith("\n\n") or text == "\n" else text, int(status)))
            text = ""
        else:
            text += line
    while len(out) < count:
        out.append((text, -1))
        text = ""
    return out


def _tail(text: str) -> str:
    return text[-6000:]


def _read_env(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    items = path.read_bytes().decode(errors="replace").split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)


def _listening_pids(port: int) -> list[int]:
    """The processes this user may see that listen on 127.0.0.1/any address, TCP ``port``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            fds = Path(f"/proc/{entry}/fd")
            if any(os.readlink(fds / fd) in inodes for fd in os.listdir(fds)):
                pids.append(int(entry))
    return sorted(pids)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 - loopback http
            return reply.status == 200 and bool(reply.read())
    except (OSError, http.client.HTTPException):
        return False


class ShellPage:
    """The shell blocks of one page, run in ``folder`` (see the module docstring)."""

    def __init__(
        self,
        blocks: Sequence[Block],
        folder: Path,
        env: Mapping[str, str],
        *,
        root: Path,
        redis_port: int | None = None,
        kafka_port: int | None = None,
        postgres_port: int | None = None,
        timeout: float = 600,
        close_timeout: float = CLOSE_TIMEOUT_S,
    ) -> None:
        self.blocks = list(blocks)
        self.folder = folder
        # Python's output in the order a terminal shows it: stdout and stderr as written.
        self.env = {**env, "PYTHONUNBUFFERED": "1"}
        self.mismatches: list[str] = []
        self.root = root
        self.timeout = timeout
        self.close_timeout = close_timeout
        self.ports: dict[int, int] = {}
        self.paths: dict[str, Path] = {}
        self.servers: list[tuple[Block, subprocess.Popen[bytes], Path]] = []
        for block in self.blocks:
            options = block.options
            for fixed in options.get("ports", ()) + options.get("serve", ())[:1]:
                self.ports.setdefault(int(fixed), free_port())
            for fixed in options.get("redis", ()):
                if redis_port is None:
                    msg = f"{block.where}: option 'redis' needs the test's redis-server"
                    raise ValueError(msg)
                self.ports[int(fixed)] = redis_port
            for fixed in options.get("kafka", ()):
                if kafka_port is None:
                    msg = f"{block.where}: option 'kafka' needs the test's Kafka broker"
                    raise ValueError(msg)
                self.ports[int(fixed)] = kafka_port
            for fixed in options.get("postgres", ()):
                if postgres_port is None:
                    msg = f"{block.where}: option 'postgres' needs the test's PostgreSQL"
                    raise ValueError(msg)
                self.ports[int(fixed)] = postgres_port
            for n, path in enumerate(options.get("paths", ()), len(self.paths)):
                self.paths.setdefault(path, folder / f"path-{n}")

    # ------------------------------------------------------------------------------ the run

    def run(self, setup: Callable[[Path, dict[str, str]], None] | None = None) -> None:
        """Run every block; raise ``BlockFailedError`` naming each failure, cleaned up after.

        ``setup(folder, env)`` prepares state the page's commands read, before the first.
        """
        failures: list[str] = []
        self._prepare()
        try:
            if setup is not None:
                setup(self.folder, dict(self.env))
            for block in self.blocks:
                if "finally" in block.options:
                    continue
                if "serve" in block.options:
                    self._serve(block)
                else:
                    self._run(block)
        except BlockFailedError as exc:
            failures.append(str(exc))
        finally:
            failures += self._stop_servers()
            for block in self.blocks:
                if "finally" in block.options:
                    try:
                        self._run(block, quiet=True)
                    except BlockFailedError as exc:
                        failures.append(str(exc))
            failures += self._kill_leftovers()
        failures += self.mismatches
        if failures:
            raise BlockFailedError("\n\n".join(failures))

    def _prepare(self) -> None:
        """The page's folder as the docs' repository folder: ``.venv`` and example configs."""
        if sys.prefix == sys.base_prefix:
            msg = (
                "the docs' shell blocks use .venv: run the tests with a virtualenv's Python, "
                f"not {sys.executable}"
            )
            raise BlockFailedError(msg)
        (self.folder / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
        conf = self.folder / "examples" / "conf"
        conf.mkdir(parents=True)
        for source in sorted((self.root / "examples" / "conf").iterdir()):
            if source.is_file():
                (conf / source.name).write_text(self._substitute(source.read_text()))
        for path in self.paths.values():
            path.mkdir()

    def _substitute(self, text: str) -> str:
        for fixed, free in self.ports.items():
            text = re.sub(rf"(?<!\d){fixed}(?!\d)", str(free), text)
        for path, local in self.paths.items():
            text = text.replace(path, str(local))
        return text

    def _unsubstitute(self, text: str) -> str:
        """What was printed, with the page's fixed ports and paths put back.

        The page's folder and the repository's both stand for the reader's repository
        folder: ``REPOSITORY``.
        """
        for fixed, free in self.ports.items():
            text = re.sub(rf"(?<!\d){free}(?!\d)", str(fixed), text)
        for path, local in self.paths.items():
            text = text.replace(str(local), path)
        for folder in (self.folder, self.root):
            text = text.replace(str(folder.resolve()), REPOSITORY).replace(str(folder), REPOSITORY)
        kept = text.splitlines(keepends=True)
        return "".join(line for line in kept if not line.startswith(JVM_NOTICE))

    def _cwd(self, block: Block) -> Path:
        return self.root if "in" in block.options else self.folder

    def _check(self, where: str, page: Path, shown: str, printed: str) -> bool:
        """Whether ``printed`` is what the page shows; if not, note why (``mismatches``)."""
        printed = self._unsubstitute(printed)
        if matches(shown, printed):
            return True
        self.mismatches.append(mismatch(where, shown, printed))
        return False

    def _check_output(self, block: Block, printed: str) -> None:
        """Check what ``block`` printed against the ``text`` block after it, if it has one."""
        shown = block.output
        if shown is None or self._check(shown.where, block.page, shown.code, printed):
            return
        if writing():
            rewrite_block(block.page, "text", shown.code, self._unsubstitute(printed))

    def _run(self, block: Block, *, quiet: bool = False) -> None:
        """Run ``block`` to its end, carrying the environment it leaves to the next one.

        ``quiet``: it may print nothing (a stop command; the page then checks its ports).
        """
        if block.lang == "console":
            self._run_console(block, quiet=quiet)
            return
        script = self.folder / ".block.sh"
        env_out = self.folder / ".block.env"
        env_out.unlink(missing_ok=True)
        trap = f"trap 'env -0 > {shlex.quote(str(env_out))}' EXIT\nexec 2>&1\n"
        script.write_text(trap + self._substitute(block.shell_code()))
        try:
            done = subprocess.run(
                ["bash", "-euo", "pipefail", str(script)],
                cwd=self._cwd(block),
                env=self.env,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired as exc:
            msg = f"{block.where} did not end within {self.timeout} s\n{_tail(str(exc.stdout))}"
            raise BlockFailedError(msg) from exc
        if done.returncode != 0:
            msg = (
                f"{block.where} exited {done.returncode}\n{_tail(done.stdout)}\n"
                f"{_tail(done.stderr)}"
            )
            raise BlockFailedError(msg)
        after = _read_env(env_out)
        changed = {k for k in after.keys() | self.env.keys() if after.get(k) != self.env.get(k)}
        if not quiet and not (done.stdout + done.stderr).strip() and not changed - _SHELL_OWN:
            msg = f"{block.where} printed nothing and changed no environment variable"
            raise BlockFailedError(msg)
        if after:
            self.env = {k: v for k, v in after.items() if k != "_"}
        self._check_output(block, done.stdout)

    def _run_console(self, block: Block, *, quiet: bool = False) -> None:
        """Run a ``console`` block's commands one by one; check what each printed.

        One bash runs them all, as at a prompt: each sees the last one's status (``echo $?``),
        a marker line between two says where one's output ends and its status.
        """
        steps = block.transcript()
        script = self.folder / ".block.sh"
        env_out = self.folder / ".block.env"
        env_out.unlink(missing_ok=True)
        lines = [f"trap 'env -0 > {shlex.quote(str(env_out))}' EXIT", "exec 2>&1", "_sb_status=0"]
        for n, (command, _) in enumerate(steps):
            lines += [
                f"(exit $_sb_status); {self._substitute(command)}",
                "_sb_status=$?",
                f"printf '\\n{_STEP_MARK} %d %d\\n' {n} $_sb_status",
            ]
        script.write_text("\n".join(lines) + "\n")
        try:
            done = subprocess.run(
                ["bash", "-uo", "pipefail", str(script)],
                cwd=self._cwd(block),
                env=self.env,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired as exc:
            msg = f"{block.where} did not end within {self.timeout} s\n{_tail(str(exc.stdout))}"
            raise BlockFailedError(msg) from exc
        printed = _steps(done.stdout, len(steps))
        for n, ((command, _), (_, status)) in enumerate(zip(steps, printed, strict=True)):
            shown_next = steps[n + 1][0].strip() if n + 1 < len(steps) else ""
            if status != 0 and shown_next != "echo $?":
                msg = (
                    f"{block.where}: `{command}` exited {status} (a console command may fail "
                    f"only when the next one is `echo $?`)\n{_tail(printed[n][0])}"
                )
                raise BlockFailedError(msg)
        after = _read_env(env_out)
        if after:
            self.env = {k: v for k, v in after.items() if k != "_"}
        differs = [
            not self._check(f"{block.where}: `{command}`", block.page, shown, text)
            for (command, shown), (text, _) in zip(steps, printed, strict=True)
        ]
        if any(differs) and writing():
            body = "".join(
                f"$ {command}\n" + (self._unsubstitute(text) if bad else shown)
                for (command, shown), (text, _), bad in zip(steps, printed, differs, strict=True)
            )
            rewrite_block(block.page, "console", block.code, body)

    # ------------------------------------------------------------------------------ servers

    def _serve(self, block: Block) -> None:
        """Start ``block`` in the background and wait until its page answers."""
        port, path = block.options["serve"][:2]
        url = f"http://127.0.0.1:{self.ports[int(port)]}{path}"
        log = self.folder / f"serve-{len(self.servers)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", self._substitute(block.shell_code())],
                cwd=self._cwd(block),
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: SIGINT reaches it as Ctrl-C would
            )
        self.servers.append((block, process, log))
        deadline = time.monotonic() + SERVE_TIMEOUT_S
        text = " ".join(block.options["serve"][2:])
        while not _answers(url) or text not in log.read_text(errors="replace"):
            if process.poll() is not None:
                msg = f"{block.where} exited {process.returncode} before {url} answered\n"
                raise BlockFailedError(msg + _tail(log.read_text(errors="replace")))
            if time.monotonic() > deadline:
                msg = (
                    f"{block.where}: {url} did not answer 200, or its output show {text!r}, "
                    f"within {SERVE_TIMEOUT_S} s\n"
                )
                raise BlockFailedError(msg + _tail(log.read_text(errors="replace")))
            time.sleep(0.1)  # the poll's pace; the condition is the page answering

    def _stop_servers(self) -> list[str]:
        """Ctrl-C to each serving block; each must exit 0 and have printed something."""
        failures = []
        for block, process, log in self.servers:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGINT)
                try:
                    process.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)
                    failures.append(f"{block.where} went on {STOP_TIMEOUT_S} s after SIGINT")
                    continue
            output = log.read_text(errors="replace")
            if process.returncode != 0:
                failures.append(
                    f"{block.where} exited {process.returncode} on SIGINT\n{_tail(output)}"
                )
            elif not output.strip():
                failures.append(f"{block.where} printed nothing")
            else:
                self._check_served(block, output)
        return failures

    def _check_served(self, block: Block, printed: str) -> None:
        """Check what a serving block printed until Ctrl-C against what its page shows."""
        if block.lang != "console":
            self._check_output(block, printed)
            return
        [(command, shown)] = block.transcript()  # a serving console block is one command
        if self._check(f"{block.where}: `{command}`", block.page, shown, printed) or not writing():
            return
        body = f"$ {command}\n{self._unsubstitute(printed)}"
        rewrite_block(block.page, "console", block.code, body)

    @staticmethod
    def _until_closed(ports: Iterable[int], timeout: float) -> None:
        """Wait until nothing listens on ``ports``, or ``timeout`` seconds have passed."""
        deadline = time.monotonic() + timeout
        while any(_listening_pids(port) for port in ports) and time.monotonic() < deadline:
            time.sleep(0.1)  # the poll's pace; the condition is every port closed

    def _kill_leftovers(self) -> list[str]:
        """Kill what still listens on a replaced port (and its children); each one fails."""
        theirs = {
            int(p)
            for b in self.blocks
            for server in ("redis", "kafka", "postgres")
            for p in b.options.get(server, ())
        }
        ours = {fixed: free for fixed, free in self.ports.items() if fixed not in theirs}
        self._until_closed(ours.values(), self.close_timeout)
        failures = []
        for fixed, free in ours.items():
            for pid in _listening_pids(free):
                tree = process_tree(pid)
                for member in tree:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(member, signal.SIGKILL)
                self._until_closed([free], CLOSE_TIMEOUT_S)
                failures.append(
                    f"{FIXED_PORTS[fixed]} (port {fixed}, here {free}) was still listening after "
                    f"the page: its stop command did not stop it; killed {tree}"
                )
        return failures
