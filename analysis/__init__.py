"""Goodput's analysis library: readers for nsys/ncu exports, the normalized schema, rules, summaries.

Pure: imports no web or queue framework and reads no configuration; callers pass arguments.
The public entry points are re-exported from ``analysis.api``.
"""
