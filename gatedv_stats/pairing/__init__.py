"""Paired structures: the runs of two arms aligned by training seed and by unit (document or item), with the
provenance checks that decide whether they may be compared at all."""
