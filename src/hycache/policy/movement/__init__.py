"""Movement policies: what goes from the device tier to the host tier, and when."""
