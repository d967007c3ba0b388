"""Configuration: the model matrix, references, golden sets, their schemas and the rules between them."""
