"""Messages on the wire, shared by the engine process (server) and its clients, one module per area:

    limits         the limits of a request's values (on its fields), and GET /api/limits
    openai         the OpenAI-compatible shapes under /v1
    conversations  localchat's conversation trees under /api/conversations and /api/search, and their event streams
    models         /api/models: the models on this machine, and switching the engine's model
    system         /health, signing in, and the error body every route answers with

Every body is a msgspec.Struct. A request with a field localchat does not know (/v1: logit_bias, audio,
modalities, ...; /api: a typo) is refused with a 400 that names it, never silently ignored. The limits of a request's
values are on its fields (msgspec.Meta): msgspec checks them as it decodes a body, and the OpenAPI schema states them.
"""
