"""What several commands share: the client commands' TLS and token flags, --estimates, the family CSV, the plan overrides, probing on the fleet, the progress bar."""
