"""The checks behind the notebooks' tests: each compares a student's code with an independent oracle
and, when they disagree, says which typical mistake the result matches."""
