"""A conversation's message tree as the UI walks it: children, siblings, and the branch ending at a leaf."""

from collections import defaultdict

from localchat.app.protocol.conversations import ConversationTree, Message


class MessageTree:
    """The messages of one conversation, indexed by id and by parent (children in the order written)."""

    def __init__(self, messages: list[Message] = ()):
        self.messages: dict[str, Message] = {}
        self.children: dict[str | None, list[str]] = defaultdict(list)
        for message in messages:
            self.add(message)

    @classmethod
    def of(cls, tree: ConversationTree) -> "MessageTree":
        return cls(tree.messages)

    def add(self, message: Message) -> None:
        """Add a message, or replace the stored one with the same id (a finished reply)."""
        if message.id not in self.messages:
            self.children[message.parent_id].append(message.id)
        self.messages[message.id] = message

    def siblings(self, message_id: str) -> list[str]:
        return self.children[self.messages[message_id].parent_id]

    def path(self, leaf: str | None) -> list[Message]:
        """root..leaf"""
        path = []
        while leaf is not None:
            path.append(self.messages[leaf])
            leaf = self.messages[leaf].parent_id
        return path[::-1]

    def newest_leaf(self, message_id: str) -> str:
        """The end of the branch through `message_id`, following the newest child down."""
        while self.children.get(message_id):
            message_id = self.children[message_id][-1]
        return message_id

    def shown_leaf(self, active_leaf: str | None) -> str | None:
        """The branch to open a conversation on: the active one (down to its newest end), else the newest message."""
        if active_leaf in self.messages:
            return self.newest_leaf(active_leaf)
        if not self.messages:
            return None
        return self.newest_leaf(max(self.messages.values(), key=lambda m: m.created_at).id)

    def place(self, message_id: str) -> tuple[int, int]:
        """Which of its siblings a message is: (2, 3) for the second of three."""
        siblings = self.siblings(message_id)
        return siblings.index(message_id) + 1, len(siblings)

    def fork_from(self, message_id: str, leaf: str | None) -> str | None:
        """Where the branch through `message_id` leaves the one that ends at `leaf`: its first message not on that one
        (None: `message_id` is on it)."""
        on_leaf = {message.id for message in self.path(leaf)} if leaf in self.messages else set()
        return next((message.id for message in self.path(message_id) if message.id not in on_leaf), None)
