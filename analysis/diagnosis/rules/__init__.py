"""Rules: the engine (``base``), the explicit registry (``registry``), and one module per rule family."""
