"""The command palette's chat commands: every action that has a key (ctrl+p lists them)."""

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


class ChatCommands(Provider):
    def commands(self) -> list[tuple[str, str]]:
        """(description, action) of the chat screen's and the focused message's keys."""
        from localchat.tui.screens.chat import ChatScreen

        if not isinstance(self.screen, ChatScreen):
            return []
        groups = self.app.help_groups()[:2]
        return [(binding.description, binding.action) for _, bindings in groups for binding in bindings
                if "focus_message" not in binding.action]  # every action, the footer's and the rest

    async def discover(self) -> Hits:
        for description, action in self.commands():
            yield DiscoveryHit(description, partial(self.screen.run_action, action))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for description, action in self.commands():
            score = matcher.match(description)
            if score > 0:
                yield Hit(score, matcher.highlight(description), partial(self.screen.run_action, action))
