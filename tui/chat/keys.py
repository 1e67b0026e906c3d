"""The chat screen's keys and a message's, in one place: the footer and the help (F1) show them, tui.toml's [keymap]
remaps them by id, and key_of writes one as the footer does, for the hints that name a key. A message's keys act on
the focused message (else the last): each is the screen's message_key action, which hands it to the part for the
actions on a message (tui/chat/message_actions.py)."""

from textual.app import App
from textual.binding import Binding

from localchat.tui.widgets.thinking_block import END_THINKING_KEY

# the footer shows a few keys, which must fit 80 columns with a message's keys and those shown only while a reply is
# written (Stop, Answer now); F1 lists every key
CHAT_KEYS = [
    Binding("f1", "help", "Help", id="help"),
    Binding("ctrl+n", "new_chat", "New", id="new_chat", tooltip="New chat"),  # short labels: 80 columns
    Binding("ctrl+f", "search", "Search", id="search"),
    Binding("ctrl+g", "fork", "Fork", id="fork", tooltip="Fork: N replies at once, to pick one"),
    Binding("ctrl+t", "branch_tree", "Branches", id="branch_tree", show=False),
    Binding("escape", "stop", "Stop", id="stop"),  # shown while a reply is written
    Binding("escape", "back_from_hit", "Back", id="back_from_hit",  # while a search hit is on another branch
            tooltip="Back from a search hit's branch"),
    Binding(END_THINKING_KEY, "end_thinking", "Answer now", id="end_thinking"),  # shown while a reply thinks
    Binding("ctrl+s", "settings", "Settings", id="settings", show=False),
    Binding("f2", "rename", "Rename", id="rename", show=False),
    Binding("f8", "delete_chat", "Delete chat", id="delete_chat", show=False),
    Binding("ctrl+o", "export", "Export", id="export", show=False),
    Binding("ctrl+b", "toggle_sidebar", "Chats", id="toggle_sidebar", tooltip="Show or hide the chat list"),
    Binding("f4", "switch_model", "Switch model", id="switch_model", show=False),
    Binding("f5", "summarize", "New chat from a summary of this one", id="summarize", show=False),
    Binding("ctrl+l", "open_linked_chat", "Open the linked chat (summary)", id="open_linked_chat", show=False),
    Binding("f3", "attach_document", "Attach a document", id="attach_document", show=False),
    Binding("f9", "pin", "Pin or unpin this chat (kept warm: its next reply never waits for its history)",
            id="pin", show=False),
]

BRANCH = Binding.Group("Branch")  # ← and → as one footer entry

# a message's keys (bound on the focused one): each needs a modifier, or is an arrow or Enter, so that typing never
# sets one off; letters typed while a message is focused go to the message box
MESSAGE_KEYS = [
    Binding("left", "screen.message_key('switch_branch', -1)", "Prev branch", id="branch_previous", group=BRANCH),
    Binding("right", "screen.message_key('switch_branch', 1)", "Next branch", id="branch_next", group=BRANCH),
    Binding("ctrl+r", "screen.message_key('regenerate')", "Regenerate", id="regenerate"),
    Binding("ctrl+e", "screen.message_key('edit')", "Edit", id="edit"),
    Binding("ctrl+d", "screen.message_key('continue_reply')", "Continue", id="continue_reply",  # on a reply cut short
            tooltip="Continue a reply cut at max tokens, stopped or edited"),
    Binding("ctrl+c", "screen.message_key('copy_message')", "Copy", id="copy_message", show=False),
    Binding("ctrl+y", "screen.message_key('copy_code')", "Copy code", id="copy_code", show=False),
    Binding("enter", "toggle_details", "Details (stats, thinking)", id="toggle_details", show=False),
    Binding("up", "screen.message_key('focus_message', -1)", "Previous message", show=False, id="message_previous"),
    Binding("down", "screen.message_key('focus_message', 1)", "Next message", show=False, id="message_next"),
]


def key_of(app: App, binding_id: str) -> str:
    """The (first) key of one of the chat's or a message's keys, as the footer writes it, remapped or not."""
    binding = next(binding for binding in [*CHAT_KEYS, *MESSAGE_KEYS] if binding.id == binding_id)
    keys = app.keymap.get(binding_id, binding.key)
    return app.get_key_display(Binding(keys.split(",")[0], binding.action))
