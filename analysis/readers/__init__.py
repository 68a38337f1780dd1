"""Readers: nsys SQLite exports and ncu CSVs into the one normalized DuckDB schema."""
