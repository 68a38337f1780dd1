"""Use cases that create and change runs from a request: uploads, who may change a run, whether a window
fits its reports."""
