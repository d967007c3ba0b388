"""Release phase: publish a passing night as a dated release, and fetch or install one on the user's side."""
