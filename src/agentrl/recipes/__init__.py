"""The chapter's recipes, one module each."""
