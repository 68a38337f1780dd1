"""Goodput's web service: the Flask application factory, the REST API and the web UI (issues #5, #6)."""
