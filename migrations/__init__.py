"""Alembic migrations; run them with ``tpmledger migrate`` (see :mod:`storage.server.migrate`)."""
