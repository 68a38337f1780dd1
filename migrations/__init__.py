"""Alembic migrations of the metadata DB (a package so that installed copies of Goodput carry them)."""
