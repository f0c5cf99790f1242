"""measure layer (see shared/DESIGN.md)."""
