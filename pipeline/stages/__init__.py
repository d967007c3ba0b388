"""The stages of one night, each a function from frozen inputs to a frozen result."""
