"""The pattern catalog: TOML files under patterns/, loaded, validated and matched."""

from forensics.catalog.load import Pattern, default_catalog_dir, load_catalog

__all__ = ["Pattern", "default_catalog_dir", "load_catalog"]
