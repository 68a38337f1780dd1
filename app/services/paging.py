"""Pagination limits shared by every list of the API: ``{"items", "page", "page_size", "total"}``."""

MAX_PAGE_SIZE = 200
DEFAULT_PAGE_SIZE = 50
