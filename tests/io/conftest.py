"""pytest configuration for the checkpoint format tests."""

# The fixture generator imports torch, which the project's environment deliberately lacks
# (the readers must work without it); it is a script, run by hand in a separate environment.
collect_ignore = ["fixtures/make_torch_fixtures.py"]
