"""Who acts: the Policy interface and the policy families."""
