"""The loops that drive collection and learning."""
