"""The pattern catalog: TOML files under patterns/, loaded, validated and matched."""

from forensics.catalog.load import Catalog, Derived, Pattern, default_catalog_dir, load_catalog, load_full

__all__ = ["Catalog", "Derived", "Pattern", "default_catalog_dir", "load_catalog", "load_full"]
