"""Tools that read graphs: command line (and, later, viz and diff)."""
