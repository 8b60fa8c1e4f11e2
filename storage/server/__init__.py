"""storage/server: The database itself: engines and the one transaction boundary, the embedded
PostgreSQL, Alembic migrations.
"""
