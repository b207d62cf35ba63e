"""Widgets of the luce-chat app."""
