"""Migration scripts, one per revision, named YYYY_MM_DD_HHMM-<rev>_<slug>.py."""
