"""Between the app's conversation and luce_sessions: what is saved when, and loading a chat back.

The session is created with the first message actually sent (an empty chat is never saved).
Each message is saved as soon as it is complete: the user's when the engine accepts the prompt,
the assistant's when the reply finishes or is cancelled (with its stats and provenance runs).
Messages form a tree: a retry or an edited prompt is a new sibling, and the session's current
leaf follows the branch on screen.
"""

from __future__ import annotations

from luce_sessions import ROOT, NotFoundError, SessionStore

from luce_tui.attachments import Attachment


class Persistence:
    def __init__(self, store: SessionStore, settings: dict):
        self.store = store
        self.settings = settings          # model, system prompt… (stored with the session)
        self.session_id: int | None = None
        self.title: str | None = None

    def _ensure(self, title: str | None = None) -> int:
        if self.session_id is None:
            s = self.store.create_session(title=title, settings=self.settings)
            self.session_id, self.title = s.id, s.title
        return self.session_id

    def new(self) -> None:
        self.session_id, self.title = None, None

    def update_settings(self, **changes) -> None:
        self.settings.update(changes)
        if self.session_id is not None:
            self.store.update_settings(self.session_id, self.settings)

    # -- saving ------------------------------------------------------------------------------
    def save_user(self, message: dict, parent_id: int | None, attachments: list[Attachment]) -> int:
        sid = self._ensure()
        records = []
        for a in attachments:
            rec = self.store.add_attachment(a.name, a.text, n_tokens=a.n_tokens)
            a.sha256 = rec.sha256
            records.append(rec)
        m = self.store.add_message(sid, "user", message.get("content") or "",
                                   ROOT if parent_id is None else parent_id, attachments=records)
        self.title = self.title or self.store.get_session(sid).title
        return m.id

    def save_reply(self, text: str, parent_id: int | None, stats: dict, spans: list[tuple[str, bool]]) -> int:
        sid = self._ensure()
        m = self.store.add_message(sid, "assistant", text, ROOT if parent_id is None else parent_id,
                                   stats=stats, provenance=spans)
        return m.id

    def save_as(self, name: str | None) -> int:
        """/save [name]: make sure the chat exists in the store, optionally renamed."""
        sid = self._ensure(name)
        if name:
            self.title = self.store.rename_session(sid, name).title
        return sid

    # -- loading -----------------------------------------------------------------------------
    def resolve(self, ref: str) -> int:
        """'last' or an id -> a session id (NotFoundError when there is none)."""
        if ref in ("", "last"):
            sessions = self.store.list_sessions(limit=1)
            if not sessions:
                raise NotFoundError("there is no saved chat to resume yet")
            return sessions[0].id
        try:
            sid = int(ref)
        except ValueError:
            matches = self.store.list_sessions(query=ref, limit=2)
            if len(matches) != 1:
                raise NotFoundError(f"no single saved chat matches {ref!r} (give its id; /sessions lists them)") \
                    from None
            return matches[0].id
        self.store.get_session(sid)   # NotFoundError if it is not there
        return sid

    def load(self, session_id: int) -> list[dict]:
        """Open a saved chat: its current branch as conversation messages (with their ids)."""
        session = self.store.get_session(session_id)
        self.session_id, self.title = session.id, session.title
        self.settings.update({k: v for k, v in session.settings.items() if k == "system"})
        out = []
        for m in self.store.path(session_id):
            msg = {"role": m.role, "content": m.content, "id": m.id}
            if m.attachments:
                msg["attachments"] = [self._attachment_part(a) for a in m.attachments]
            if m.role == "assistant":
                msg["spans"] = m.spans()
                msg["stats"] = m.stats or {}
            out.append(msg)
        return out

    def _attachment_part(self, a) -> dict:
        full = self.store.get_attachment(a.sha256)
        return {"name": a.name, "text": full.text or "", "n_tokens": a.n_tokens, "sha256": a.sha256}
