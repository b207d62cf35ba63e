"""luce_tui — the luce-chat front ends: one-shot (-p), the plain prompt_toolkit REPL, and the Textual app."""
