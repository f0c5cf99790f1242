"""Tuning on the user's model: batch-size search and the precision sweep."""
