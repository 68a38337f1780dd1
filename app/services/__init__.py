"""Use cases the API and the web UI both call: take a session and plain values, commit, return plain data."""
