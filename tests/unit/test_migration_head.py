"""The head revision a server compares with its database's at each start (jobwire.db.migrate.HEAD,
kept in the code so a start imports no Alembic) is the head of the migration scripts."""

from __future__ import annotations

import subprocess
import sys

from alembic.script import ScriptDirectory

from jobwire.db import migrate


def test_head_is_the_newest_migration() -> None:
    scripts = ScriptDirectory(str(migrate.MIGRATIONS))
    assert scripts.get_heads() == [migrate.HEAD], "a migration was added: set jobwire.db.migrate.HEAD to its revision"


def test_a_start_imports_no_alembic() -> None:
    code = "import sys, jobwire.db.migrate, jobwire.db.store; print('alembic' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stderr
