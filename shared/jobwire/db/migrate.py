"""Create or upgrade the schema through Alembic (`python -m jobwire migrate`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from jobwire.db.engine import Database

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(db: Database) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["database"] = db
    return config


def upgrade(db: Database, revision: str = "head") -> None:
    config = alembic_config(db)
    with db.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
