"""Full-ranking evaluation (spec §3)."""
