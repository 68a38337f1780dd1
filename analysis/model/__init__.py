"""The trace model: a normalized report opened read-only, its tables, intervals and call classes."""
