"""Repository-level checks: pins, documents, ``make lab``, the repository URL, the site, the architecture."""
