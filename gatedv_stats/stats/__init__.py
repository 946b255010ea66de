"""Pure statistics over arrays: each function takes arrays and returns a small named result object."""
