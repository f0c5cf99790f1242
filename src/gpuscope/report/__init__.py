"""report layer (see shared/DESIGN.md)."""
