"""Reprocess many historical incidents: one report each, a fleet index and a fleet summary."""
