"""The read side: runs lists and details, reports, findings, the read store of analysis results, jobs'
history, the rule catalogue, health."""
