"""The chat screen's parts (tui/screens/chat.py composes them): each one job, in one pattern. A part is a widget
without a face, mounted in the chat screen, so that it runs its own engine work (@engine_work), says what it has to say
(notify) and opens its dialogs. It is given what it works on, never the screen: the engine client, the ChatHost
(host.py: the chat session, the message box, the branch on screen, showing that branch, opening a chat), the widgets
it draws on, and where it asks another part something, that part as a small Protocol. What it changes of a chat it
changes through ChatSession's methods; what another part must learn it posts up as a typed message (news.py), which
the screen hands down to that part."""
