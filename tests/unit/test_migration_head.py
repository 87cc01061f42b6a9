"""The head revision a server compares with its database's at each start (jobwire.db.migrate.HEAD,
kept in the code so a start imports no Alembic) is the head of the migration scripts."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from jobwire.db import migrate
from jobwire.db.engine import Database


def test_head_is_the_newest_migration() -> None:
    scripts = ScriptDirectory(str(migrate.MIGRATIONS))
    assert scripts.get_heads() == [migrate.HEAD], "a migration was added: set jobwire.db.migrate.HEAD to its revision"


def test_a_start_imports_no_alembic() -> None:
    code = "import sys, jobwire.db.migrate, jobwire.db.store; print('alembic' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stderr


def test_a_new_databases_upgrade_says_one_line_and_alembic_only_when_debugging(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Alembic's INFO lines (a plugin and a revision each) filled a newcomer's first screen before
    `make run` said it served: at INFO the upgrade says what it did in one line."""
    for level, alembic_lines in ((logging.INFO, False), (logging.DEBUG, True)):
        caplog.clear()
        db = Database(f"sqlite:///{tmp_path / f'{level}.db'}")
        try:
            with caplog.at_level(level):
                migrate.upgrade(db)
        finally:
            db.dispose()
        ours = [r.getMessage() for r in caplog.records if r.name == migrate.__name__]
        assert ours == [f"database schema upgraded from revision none (a new database) to {migrate.HEAD}"]
        assert any(r.name.startswith("alembic") for r in caplog.records) is alembic_lines
        assert logging.getLogger("alembic").level == logging.NOTSET  # put back
