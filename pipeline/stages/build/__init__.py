"""Build phase: pin upstream to commits, compile wheels for the target, inspect them and lock the night."""
