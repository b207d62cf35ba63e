"""luce_sessions — session persistence for luce-chat (SQLite store and engine snapshots; arrives with the TUI issue)."""
