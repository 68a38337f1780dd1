"""Pagination limits shared by every list of the API: ``{"items", "page", "page_size", "total"}``."""

MAX_PAGE_SIZE = 200
DEFAULT_PAGE_SIZE = 50
# Highest page number: past it, offsets overflow the databases' 64-bit integers.
MAX_PAGE = 1_000_000
