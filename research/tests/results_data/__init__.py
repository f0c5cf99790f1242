"""The records, calibrations and JSON files of each dated results folder, with the selections the tests
of research/tests use (one module per folder under research/results/)."""
