"""The README's quickstart, run as a newcomer would: its code blocks, taken from README.md.

Each block the quickstart runs is marked in README.md by the comment before it:
`<!-- quickstart: file NAME -->` writes the block to NAME, `<!-- quickstart: file NAME, run -->`
also runs it with Python, and `<!-- quickstart: worker -->` is the shell line that starts the
worker. The blocks run in an empty folder against a real server on a free port (the README's
`127.0.0.1:50051` is the only thing replaced), with a real `jobwire-worker` process, so the
first page can never drift from the code.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from processes import ServerProcess, start_server_process

README = Path(__file__).resolve().parents[2] / "README.md"
README_TARGET = "127.0.0.1:50051"
_MARKED = re.compile(r"<!-- quickstart: ([^>]*?) -->\n```(\w+)\n(.*?)\n```", re.DOTALL)


@dataclass(frozen=True)
class Block:
    what: str  # "file NAME", "file NAME, run" or "worker"
    language: str
    text: str


def quickstart_blocks(readme: str) -> list[Block]:
    return [Block(what.strip(), language, text) for what, language, text in _MARKED.findall(readme)]


def test_the_readme_marks_a_handler_a_worker_and_a_client() -> None:
    blocks = quickstart_blocks(README.read_text())
    kinds = [b.what.split()[0].rstrip(",") for b in blocks]
    assert kinds.count("file") >= 2 and kinds.count("worker") == 1, [b.what for b in blocks]
    for block in blocks:
        if block.language == "python":
            ast.parse(block.text)  # a block that does not parse fails here, with its line


def _promised_output(code: str) -> object | None:
    """The value the last `print(...)  # value` line of `code` promises, if it promises one."""
    last = code.strip().splitlines()[-1]
    if "print(" not in last or "  # " not in last:
        return None
    return ast.literal_eval(last.split("  # ", 1)[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    env = {"JOBWIRE_DATABASE_URL": f"sqlite:///{tmp_path / 'jobwire.db'}", "JOBWIRE_LISTEN": "127.0.0.1:0"}
    served = start_server_process(["jobwire", "serve", "--processes", "1"], env)
    try:
        yield served
    finally:
        if served.proc.poll() is None:
            served.terminate()


def test_the_readme_quickstart_runs(server: ServerProcess, tmp_path: Path) -> None:
    work = tmp_path / "newcomer"
    work.mkdir()
    runs: list[Path] = []
    worker_line = ""
    for block in quickstart_blocks(README.read_text()):
        text = block.text.replace(README_TARGET, server.target)
        if block.what == "worker":
            worker_line = next(line for line in text.splitlines() if line.startswith("jobwire-worker"))
            continue
        name, _, run = block.what.removeprefix("file ").partition(",")
        (work / name.strip()).write_text(text + "\n")
        if run.strip() == "run":
            runs.append(work / name.strip())
    assert worker_line and runs
    bin_dir = Path(sys.executable).parent
    argv = shlex.split(worker_line)
    worker = subprocess.Popen(
        [str(bin_dir / argv[0]), *argv[1:]], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        for script in runs:
            done = subprocess.run(
                [sys.executable, script.name], cwd=work, capture_output=True, text=True, timeout=60, check=False
            )
            assert done.returncode == 0, done.stdout + done.stderr
            out = done.stdout
            assert " READY " in out, out  # the watch printed the status by its name
            promised = _promised_output(script.read_text())
            if promised is not None:  # the last line's comment in the README says what it prints
                assert ast.literal_eval(out.strip().splitlines()[-1]) == promised, out
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output
