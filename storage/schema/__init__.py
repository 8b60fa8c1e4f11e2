"""storage/schema: What the database holds: the SQLAlchemy models and the column declarations the
tables, writers and readers follow.
"""
