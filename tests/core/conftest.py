"""Core test configuration."""

# Fixture-making scripts need torch and mergekit, which CI does not install.
collect_ignore = ["fixtures/make_mergekit_fixtures.py"]
