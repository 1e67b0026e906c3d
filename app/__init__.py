"""Two programs and what they share.

- `server/`: the engine process (`localchat serve`): the HTTP API, the conversation store, security and its
  own lifecycle. It owns the engine.
- `client/`: what talks to a running engine process over HTTP: the client the terminal UI uses, finding or
  starting the process, the one-shot `localchat chat`.
- Shared by both: the wire types (`protocol/`, one module per API area), messages as Markdown for people
  (`markdown.py`), where files live (`paths.py`), the running engine's state file and lock (`engine_state.py`) and
  the event-stream reader (`sse.py`).
- `cli.py`: the `localchat` command, above all of them (it starts the server, a client or the terminal UI).
"""
