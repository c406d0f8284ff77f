"""Instructor tooling: build release/ and solutions/ from source/, and grade a class with nbgrader."""

from autograder.startup import skip_iri_grammar

skip_iri_grammar()  # before anything imports jsonschema (autograder/startup.py)


class GradingError(Exception):
    """A problem with the instructor's request (unknown assignment, unreadable batch, no sandbox): the command
    line prints it and exits with status 2; library callers catch it."""
