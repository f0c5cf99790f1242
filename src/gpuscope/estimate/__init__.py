"""estimate layer (see shared/DESIGN.md)."""
