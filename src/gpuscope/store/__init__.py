"""store layer (see shared/DESIGN.md)."""
