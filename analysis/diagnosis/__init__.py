"""Diagnosis: the breakdown, the idle anatomy, the rules and the verdict of one report."""
