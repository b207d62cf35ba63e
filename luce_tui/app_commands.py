"""The app's slash commands (`cmd_<name>`), mixed into LuceApp. The table is in commands.py."""

from __future__ import annotations

import json
from pathlib import Path

from textual import work

from luce_tui import attachments, commands, config, locations, userconfig
from luce_tui.attachments import AttachmentError
from luce_tui.widgets.messages import AssistantMessage, message_widgets


class CommandsMixin:
    """Needs the LuceApp attributes: conv, engine, model, persist, pending, job, say(), …"""

    async def run_command(self, line: str) -> None:
        try:
            cmd, rest = commands.parse(line)
        except commands.CommandError as e:
            await self.say(str(e), "error")
            return
        try:
            await getattr(self, "cmd_" + cmd.name)(rest)
        except commands.CommandError as e:
            await self.say(str(e), "error")
        except Exception as e:   # a command must never take the app down
            await self.say(f"/{cmd.name} failed: {e}", "error")

    def _need_idle(self, what: str) -> None:
        if self.job is not None:
            raise commands.CommandError(f"{what} has to wait until the reply is done (Esc cancels it)")

    def _need_store(self) -> None:
        if self.persist is None:
            raise commands.CommandError("chats are not being saved this time (see the note at the start)")

    # -- information -------------------------------------------------------------------------------
    async def cmd_help(self, rest: str) -> None:
        await self.say(commands.help_text())

    async def cmd_quit(self, rest: str) -> None:
        await self.action_quit()

    async def cmd_stats(self, rest: str) -> None:
        eng, last = self.engine, self.last_result
        s = eng.stats()
        of = f" of {eng.n_ctx:,}" if eng.n_ctx else ""
        lines = [f"last reply: {last.summary()}" if last else "last reply: none yet",
                 f"context: {eng.n_past:,}{of} tokens in use, {len(self.conv.messages)} messages",
                 f"total: prefill {s['n_prefill_tokens']:,} tok in {s['prefill_ms'] / 1e3:.2f} s, "
                 f"decode {s['n_decode_tokens']:,} tok in {s['decode_ms'] / 1e3:.2f} s"]
        if last is not None and last.acceptance is not None:
            lines.append(f"speculation: {last.n_accepted}/{last.n_drafted} drafted tokens accepted "
                         f"({100 * last.acceptance:.0f}%), AL {last.accept_length:.2f}")
        await self.say("\n".join(lines))

    async def cmd_model(self, rest: str) -> None:
        m, eng = self.model, self.engine
        if self.remote:
            await self.say(f"model:   {m.name} on the server {m.url}" + (f"\ncontext: n_ctx {m.n_ctx:,}" if m.n_ctx else ""))
            return

        def prefill_line() -> str:
            comp = getattr(self.conv, "compressor", None)
            if comp is not None:
                return comp.describe()
            return f"{self.opts.pflash_scorer} (compression off)" if self.opts.pflash_scorer else "none"

        def draft_line() -> str:
            d = self.runtime.draft
            if d is None:
                return f"{self.opts.draft} (speculation off)" if self.opts.draft else "none"
            sp = self.runtime.speculator
            st = sp.stats if sp is not None else None
            extra = f", {sp.describe()}" if hasattr(sp, "describe") else ""
            extra += (f", AL {st.acceptance_length:.2f} over {st.n_steps} steps" if st and st.n_steps else "")
            return (f"{d.path} ({d.dialect} dialect, block {d.block_size}, "
                    f"target layers {list(d.capture_layers)}{extra})")

        from luce_tui import memory

        # the same plan, rows and verdict as `luce-chat --plan` with these settings
        plan = m.plan(n_ctx=eng.n_ctx, cache_type_k=eng.cache_type_k, cache_type_v=eng.cache_type_v,
                      n_verify_max=getattr(eng, "n_verify_max", 16), rollback=eng.rollback, check=False)
        need = memory.device_need(plan)
        threads = f", {self.opts.threads} CPU thread{'s' if self.opts.threads != 1 else ''}" if self.opts.threads else ""
        await self.say("\n".join([
            f"model:   {m.name} ({m.arch}, {m.n_params / 1e6:.1f}M params, {config.human_bytes(m.weight_bytes)})",
            f"file:    {m.path}",
            f"draft:   {draft_line()}",
            f"PFlash scorer: {prefill_line()}",
            f"device:  {m.device}{threads}",
            f"weights: {m.weight_types}",
            f"context: n_ctx {eng.n_ctx:,} (trained {m.n_ctx_train:,}), KV {eng.cache_type_k}/{eng.cache_type_v}",
            "memory plan:",
            config.format_plan(plan),
            "  " + memory.verdict(need, memory.budget(plan), m.device),
        ]))

    # -- settings ----------------------------------------------------------------------------------
    async def cmd_system(self, rest: str) -> None:
        if not rest:
            if self.conv.system:
                await self.say(f"system: {self.conv.system}")
            else:
                default = self.conv.default_system()
                await self.say(f"system: the template's default, “{default}”" if default
                               else "system: none (the template adds no system prompt of its own)")
            return
        self._need_idle("changing the system prompt")
        self.conv.system = rest
        if self.persist is not None:
            self.persist.update_settings(system=rest)
        await self.say("system prompt set; it applies from the next reply")

    async def cmd_sampling(self, rest: str) -> None:
        if not rest:
            await self.say(config.format_sampling(self.sampling))
            return
        try:
            new = config.parse_sampling_assignments(rest.split(), self.sampling)
        except ValueError as e:
            raise commands.CommandError(str(e)) from None
        old, self.sampling = self.sampling, new
        await self.say(f"sampling set, from the next reply: {config.format_sampling(new)}"
                       + ("" if new != old else " (unchanged)"))

    async def cmd_theme(self, rest: str) -> None:
        names = sorted(self.available_themes)
        if not rest:
            await self.say(f"theme: {self.theme} (available: {', '.join(names)})")
            return
        if rest not in self.available_themes:
            raise commands.CommandError(f"unknown theme {rest!r} (available: {', '.join(names)})")
        self.theme = rest
        remembered = userconfig.remember_theme(rest)
        await self.say(f"theme: {rest}" + ("" if remembered else " (it could not be remembered for the next start)"))

    async def cmd_highlight(self, rest: str) -> None:
        self.highlight = not self.highlight
        for w in self.query(AssistantMessage):
            w.set_highlight(self.highlight)
        if not self.highlight:
            await self.say("highlight off: replies are rendered as Markdown")
        elif getattr(self.engine, "draft", None) is None:
            await self.say("highlight on: replies show raw text; no draft model is loaded (--draft), so no token "
                           "comes from a draft and none is coloured")
        else:
            await self.say("highlight on: replies show raw text, tokens from accepted drafts coloured")

    # -- attachments -------------------------------------------------------------------------------
    async def cmd_attach(self, rest: str) -> None:
        args = commands.split_args(rest)
        flags = [a for a in args if a in ("--compress", "--full")]
        paths = [a for a in args if a not in ("--compress", "--full")]   # ./--full names such a file
        if not paths or len(set(flags)) > 1:
            raise commands.CommandError("usage: /attach PATH… [--compress|--full] (text files; quote paths with "
                                        "spaces)")
        force = flags[0] == "--compress" if flags else None
        if force and self.conv.compressor is None:
            raise commands.CommandError(self._compression_off())
        taken = [a.name for a in self.pending] + list(self.query_one("#chips").pending)
        names = attachments.unique_names(paths, taken)
        self._read_attachments(list(zip(paths, names)), compress=force)

    async def attach_text(self, name: str, text: str) -> None:
        self._read_attachments([(name, name)], text=text)

    @work(thread=True, group="attach")
    def _read_attachments(self, files: list[tuple[str, str]], text: str | None = None,
                          compress: bool | None = None) -> None:
        """Worker thread: read + count tokens (seconds for a big file), then back on the UI; one
        file after the other, so the chips come in the order of the arguments."""
        for _, name in files:
            self.call_from_thread(self._counting, name, True)
        tok = self.model.tokenizer
        for path, name in files:
            try:
                att = (attachments.from_text(name, text, tok) if text is not None
                       else attachments.read(path, tok, name=name))
            except AttachmentError as e:
                self.call_from_thread(self._attach_done, name, None, str(e))
            else:
                att.compress = compress
                self.call_from_thread(self._attach_done, name, att, None)

    def _counting(self, name: str, on: bool) -> None:
        chips = self.query_one("#chips")
        if on:
            chips.pending.append(name)
        elif name in chips.pending:
            chips.pending.remove(name)
        self._refresh_chips()

    async def _attach_done(self, name: str, att, error: str | None) -> None:
        self._counting(name, False)
        if error:
            await self.say(error, "error")
            return
        self.pending.append(att)
        self._refresh_chips()
        n_ctx = self.engine.n_ctx
        if not n_ctx:   # a server that does not say its context: it checks the prompt itself
            return
        total = sum(a.n_tokens for a in self.pending)
        comp = self.conv.compressor
        plan = attachments.compress_plan(self.pending, comp)
        if any(plan):
            kept = sum(int(a.n_tokens * comp.config.keep_ratio) + 1 if w else a.n_tokens
                       for a, w in zip(self.pending, plan))
            await self.say(f"{sum(plan)} of {len(plan)} attachments will be compressed (keep "
                           f"{comp.config.keep_ratio:.0%}) for your question: about {kept:,} of their {total:,} "
                           f"tokens go into the prompt; click a chip or use /compress to choose per file")
            total = kept
        problem = attachments.budget_error(self.engine.n_past + total, n_ctx, self._reply_reserve(),
                                           self.model.n_ctx_train, has_history=bool(self.conv.messages),
                                           has_attachments=True, compressor=comp is not None)
        if problem:
            await self.say(f"{att.name} ({att.n_tokens:,} tokens) will not fit: with the chat so far it needs "
                           f"about {self.engine.n_past + total:,} of {n_ctx:,} tokens. "
                           + problem.split("; ", 1)[1].capitalize(), "warning")

    def _compression_off(self) -> str:
        if self.opts.pflash_scorer:
            return (f"PFlash is off ({self.opts.pflash_scorer} is not in use): attachments "
                    "are sent in full")
        return ("compressing an attachment needs a PFlash scorer: start luce-chat with --pflash-scorer PATH; "
                "attachments are sent in full")

    async def cmd_compress(self, rest: str) -> None:
        """/compress [auto|on|off] [NAME…]: the PFlash choice of pending attachments (all without NAME)."""
        comp = self.conv.compressor
        if comp is None:
            raise commands.CommandError(self._compression_off())
        args = commands.split_args(rest)
        if args:
            if args[0].lower() not in attachments.COMPRESS_MODES:
                raise commands.CommandError("usage: /compress [auto|on|off] [NAME…]")
            if not self.pending:
                raise commands.CommandError("there are no attachments waiting to be sent (/attach one first)")
            names = set(args[1:])
            unknown = names - {a.name for a in self.pending}
            if unknown:
                raise commands.CommandError(f"no attachment named {sorted(unknown)[0]!r} "
                                            f"(pending: {', '.join(a.name for a in self.pending)})")
            for a in self.pending:
                if not names or a.name in names:
                    a.compress = attachments.COMPRESS_MODES[args[0].lower()]
            self._refresh_chips()
        plan = attachments.compress_plan(self.pending, comp)
        lines = [f"PFlash: {comp.describe()}"]
        lines += [a.chip(w) for a, w in zip(self.pending, plan)] or ["no attachments waiting to be sent"]
        await self.say("\n".join(lines))

    async def on_chip_pressed(self, event) -> None:
        """A click on a pending attachment's chip cycles its PFlash choice: auto → compress → full."""
        if self.conv.compressor is None:
            await self.say(self._compression_off(), "warning")
        elif 0 <= event.index < len(self.pending):
            a = self.pending[event.index]
            a.compress = {None: True, True: False, False: None}[a.compress]
            self._refresh_chips()

    async def cmd_detach(self, rest: str) -> None:
        if not self.pending:
            raise commands.CommandError("there are no attachments to drop")
        if rest:
            keep = [a for a in self.pending if a.name != rest]
            if len(keep) == len(self.pending):
                raise commands.CommandError(f"no attachment named {rest!r} "
                                            f"(pending: {', '.join(a.name for a in self.pending)})")
            dropped = len(self.pending) - len(keep)
            self.pending = keep
        else:
            dropped, self.pending = len(self.pending), []
        self._refresh_chips()
        await self.say(f"dropped {dropped} attachment{'s' if dropped != 1 else ''}")

    # -- conversation ------------------------------------------------------------------------------
    async def cmd_new(self, rest: str) -> None:
        self._need_idle("/new")
        self.conv.reset()
        if self.persist is not None:
            self.persist.new()
        self.edit_index, self.pending, self.last_result = None, [], None
        self._refresh_chips()
        await self.chat.remove_children()
        self.live.last = ""
        self._show_stats()
        self._update_title()
        await self.say("new chat")

    async def cmd_retry(self, rest: str) -> None:
        self._need_idle("/retry")
        msgs = self.conv.messages
        if not msgs or msgs[-1]["role"] != "assistant":
            raise commands.CommandError("there is no reply to retry yet")
        await self._remove_from(len(msgs) - 1)
        await self._start_reply(msgs[:-1], None, [])

    async def cmd_edit(self, rest: str) -> None:
        self._need_idle("/edit")
        users = [i for i, m in enumerate(self.conv.messages) if m["role"] == "user"]
        if not users:
            raise commands.CommandError("there is no message of yours to edit yet")
        i = users[-1]
        msg = self.conv.messages[i]
        self.edit_index = i
        # the PFlash choice stays; the excerpts do not (they depend on the question, which may change)
        self.pending = [attachments.Attachment(a["name"], a["text"], a.get("n_tokens") or 0, a.get("sha256"),
                                               a.get("compress")) for a in msg.get("attachments") or ()]
        self._refresh_chips()
        self.prefill_input(msg.get("content") or "")
        await self.say("editing your last message: Enter sends it as a new branch (the original stays saved), "
                       "Esc cancels the edit")

    # -- sessions ----------------------------------------------------------------------------------
    async def cmd_save(self, rest: str) -> None:
        self._need_store()
        sid = self.persist.save_as(rest.strip() or None)
        self._update_title()
        title = self.persist.title or "(untitled)"
        await self.say(f"saved as “{title}” (chat {sid}); every message is saved as it completes, "
                       f"`luce-chat --resume {sid}` reopens it")

    async def cmd_export(self, rest: str) -> None:
        self._need_store()
        args = commands.split_args(rest)
        if not args or args[0] not in ("md", "json"):
            raise commands.CommandError("usage: /export md|json [PATH]")
        if self.persist.session_id is None or not self.conv.messages:
            raise commands.CommandError("nothing to export yet: send a message first")
        fmt, sid = args[0], self.persist.session_id
        if len(args) > 1:
            path = Path(args[1]).expanduser()
        else:   # not wherever the app happened to be started: next to the chats
            path = locations.data_dir() / "exports" / f"luce-chat-{sid}.{fmt}"
            path.parent.mkdir(parents=True, exist_ok=True)
        store = self.persist.store
        text = (store.export_markdown(sid) if fmt == "md"
                else json.dumps(store.export_json(sid), ensure_ascii=False, indent=2) + "\n")
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            raise commands.CommandError(f"cannot write {path}: {e.strerror or e}") from None
        await self.say(f"exported to {path}")

    async def cmd_sessions(self, rest: str) -> None:
        self._need_store()
        from luce_tui.screens.sessions import SessionsScreen

        async def done(result: dict | None) -> None:
            if not result:
                return
            current = self.persist.session_id
            for sid in result["deleted"] if self.states is not None else ():
                self.states.forget(sid)
            if current is not None and current in result["deleted"]:
                self.persist.new()
                await self.say("the open chat was deleted; what is on screen is no longer saved", "warning")
            if current in result["renamed"]:
                self.persist.title = self.persist.store.get_session(current).title
            self._update_title()
            if result["open"] is not None:
                await self.open_session(result["open"])

        instant = self.states.saved_ids() if self.states is not None else set()
        await self.push_screen(SessionsScreen(self.persist.store, self.persist.session_id, instant=instant), done)

    async def cmd_resume(self, rest: str) -> None:
        self._need_store()
        from luce_sessions import NotFoundError

        try:
            sid = self.persist.resolve(rest.strip() or "last")
        except NotFoundError as e:
            raise commands.CommandError(str(e)) from None
        await self.open_session(sid)

    async def open_session(self, session_id: int) -> None:
        """Show a saved chat and prefill its history into the engine (in a worker)."""
        self._need_idle("opening a chat")
        try:
            messages = self.persist.load(session_id)
        except (ValueError, LookupError) as e:   # e.g. a damaged stats column: say so, keep the open chat
            raise commands.CommandError(f"cannot open chat {session_id}: {e}") from None
        self.conv.messages = messages
        self.conv.system = self.persist.settings.get("system") or self.opts.system
        self.edit_index, self.pending, self.last_result = None, [], None
        self._refresh_chips()
        await self.chat.remove_children()
        widgets = message_widgets(list(enumerate(messages)), self.highlight)
        if widgets:
            await self.chat.mount_all(widgets)
        self.chat.anchor()
        self._update_title()
        total = self.persist.store.get_session(session_id).n_messages
        count = (f"{len(messages)} messages" if total == len(messages)
                 else f"{len(messages)} messages on this branch, {total} in all")
        await self.say(f"opened “{self.persist.title or '(untitled)'}” ({count})")
        for w in self.persist.warnings:
            await self.say(w, "warning")
        self._prefill_history()

    def _prefill_history(self) -> None:
        from luce_tui.generation import Job

        conv, states, sid = self.conv, self.states, self.persist.session_id if self.persist else None

        def work(job: Job) -> int:
            if states is not None and sid is not None and conv.messages:   # its saved engine state first
                job.info["resumed"] = states.resume(sid, conv.encode(add_generation_prompt=False))
            return conv.prefill_history(progress=job.on_progress, stop=job.cancel_requested)

        job = Job("prefill", work, self, cancel=conv.cancel, clock=self.job_clock)
        self._start_job(job, note="prefilling the history")
