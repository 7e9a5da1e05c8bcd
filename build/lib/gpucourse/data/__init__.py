"""Data sets used by the episodes: download, cache, and offline stand-ins."""
