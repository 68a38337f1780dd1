"""People and machines: users, sign-in and its throttling, sessions, API tokens and their use."""
