"""Instructor tooling: build release/ and solutions/ from source/, and grade a class with nbgrader."""
