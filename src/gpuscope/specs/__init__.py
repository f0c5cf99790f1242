"""specs layer (see shared/DESIGN.md)."""
