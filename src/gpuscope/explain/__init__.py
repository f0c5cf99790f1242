"""explain layer (see shared/DESIGN.md)."""
