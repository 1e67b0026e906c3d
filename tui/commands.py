"""The command palette's chat commands: every action that has a key (ctrl+p lists them)."""

from functools import partial

from textual.actions import parse
from textual.command import DiscoveryHit, Hit, Hits, Provider


class ChatCommands(Provider):
    def commands(self) -> list[tuple[str, str]]:
        """(description, action) of the chat screen's and the focused message's keys, those that do something now
        (not Branches or Export in an empty chat)."""
        from localchat.tui.screens.chat import ChatScreen

        if not isinstance(self.screen, ChatScreen):
            return []
        (_, chat), (_, message) = self.app.help_groups()[:2]
        on_screen = [binding for binding in message if binding.action.startswith("screen.")]  # not Details: its own
        return [(binding.tooltip or binding.description, binding.action) for binding in [*chat, *on_screen]
                if "focus_message" not in binding.action and self.available(binding.action)]

    def available(self, action: str) -> bool:
        """The chat screen's check_action does not turn it off now (a message's key, "screen.message_key('edit')",
        included)."""
        _, name, parameters = parse(action)
        return self.screen.check_action(name, parameters) is not False

    async def discover(self) -> Hits:
        for description, action in self.commands():
            yield DiscoveryHit(description, partial(self.screen.run_action, action))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for description, action in self.commands():
            score = matcher.match(description)
            if score > 0:
                yield Hit(score, matcher.highlight(description), partial(self.screen.run_action, action))
