"""Full-ranking evaluation (SPEC section 3)."""
