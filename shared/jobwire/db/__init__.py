"""Storage: SQLAlchemy Core tables, the engine, and the store that owns every write."""
