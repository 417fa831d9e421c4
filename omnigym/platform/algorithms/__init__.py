"""Things that learn. One file per algorithm; each reads top to bottom."""
