"""Pipeline steps beyond text logs: each reads frames or files and merges results into an Incident."""
