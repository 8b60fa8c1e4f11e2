"""storage owns the database: models, the one transaction boundary, bulk writes, migrations."""
