"""Modal screens of the luce-chat app."""
