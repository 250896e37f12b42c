"""Record-store schema migrations (Alembic), installed as arbiter.db."""
