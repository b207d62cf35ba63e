"""Between the app's conversation and luce_sessions: what is saved when, and loading a chat back.

The session is created with the first message actually sent (an empty chat is never saved).
Each message is saved as soon as it is complete: the user's when the engine accepts the prompt,
the assistant's when the reply finishes or is cancelled (with its stats and provenance runs).
Messages form a tree: a retry or an edited prompt is a new sibling, and the session's current
leaf follows the branch on screen.

PFlash: a user message's stats hold, per attachment, what its prompt was built from: the user's
choice ("compress") and the compressed excerpt with its numbers ("compressed", "compression"),
as {"pflash": [{...}, {...}]} in attachment order. A resumed chat renders the same excerpts, so
its prefilled context equals the one it had. Old files have no such key (nothing was compressed);
a value that is not what save_user writes is dropped with a warning (that file then goes into the
prompt whole), never trusted.
"""

from __future__ import annotations

from luce_sessions import ROOT, NotFoundError, SessionStore

from luce_tui.attachments import Attachment

PFLASH_KEYS = ("compress", "compressed", "compression")   # the attachment part's keys saved in stats


class Persistence:
    def __init__(self, store: SessionStore, settings: dict):
        self.store = store
        self.settings = settings          # model, system prompt… (stored with the session)
        self.session_id: int | None = None
        self.title: str | None = None
        self.warnings: list[str] = []     # from the last load()

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
        pflash = [{k: part[k] for k in PFLASH_KEYS if part.get(k) is not None}
                  for part in message.get("attachments") or ()]
        m = self.store.add_message(sid, "user", message.get("content") or "",
                                   ROOT if parent_id is None else parent_id, attachments=records,
                                   stats={"pflash": pflash} if any(pflash) else None)
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
        """Open a saved chat: its current branch as conversation messages (with their ids).
        self.warnings lists what could not be restored exactly (for the UI to show)."""
        session = self.store.get_session(session_id)
        path = self.store.path(session_id)   # read everything before switching to the session
        out, warnings = [], []
        for m in path:
            msg = {"role": m.role, "content": m.content, "id": m.id}
            if m.attachments:
                saved = _pflash_parts(m.stats, [a.name for a in m.attachments], warnings)
                msg["attachments"] = [dict(self._attachment_part(a), **x) for a, x in zip(m.attachments, saved)]
            if m.role == "assistant":
                msg["spans"] = m.spans()
                msg["stats"] = m.stats or {}
            out.append(msg)
        self.session_id, self.title = session.id, session.title
        self.settings.update({k: v for k, v in session.settings.items() if k == "system"})
        self.warnings = warnings
        return out

    def _attachment_part(self, a) -> dict:
        full = self.store.get_attachment(a.sha256)
        return {"name": a.name, "text": full.text or "", "n_tokens": a.n_tokens, "sha256": a.sha256}


def _pflash_parts(stats, names: list[str], warnings: list[str]) -> list[dict]:
    """The saved PFlash keys of each attachment of a user message (see the module's docstring)."""
    out: list[dict] = [{} for _ in names]
    saved = (stats or {}).get("pflash") if isinstance(stats, dict) else None
    if saved is None:
        return out
    whole = "the whole file goes into the prompt (the model may see more than before, and the chat may no longer fit)"
    if not isinstance(saved, list):
        warnings.append(f"the saved excerpts of {', '.join(names)} are unreadable, so {whole}")
        return out
    for i, (name, entry) in enumerate(zip(names, saved)):
        if not entry:
            continue   # this file was not compressed
        entry = entry if isinstance(entry, dict) else {"compressed": None, "compression": entry}
        if isinstance(entry.get("compress"), bool):
            out[i]["compress"] = entry["compress"]
        text, info = entry.get("compressed"), entry.get("compression")
        if text is None and info is None:
            continue
        if isinstance(text, str) and _valid_compression(info):
            out[i].update(compressed=text, compression=info)
        else:
            warnings.append(f"the saved excerpt of {name} is unreadable, so {whole}")
    return out


def _valid_compression(info) -> bool:
    def number(v, kinds=(int, float)) -> bool:
        return isinstance(v, kinds) and not isinstance(v, bool) and v >= 0

    return (isinstance(info, dict) and number(info.get("n_original"), int) and number(info.get("n_kept"), int)
            and all(number(info[k]) for k in ("scorer_ms", "keep_ratio") if k in info))
