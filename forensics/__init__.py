"""forensics: postmortems for failed, hung or slow distributed training runs."""

__version__ = "0.1.0"
